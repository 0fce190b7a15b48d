"""Adapters whose config names a hub id (the embedded model's checkpoints do) are read,
copied and written without a look at the Hub: PEFT's "auto" check of the base model's
vocabulary would try the network on every save and print a warning offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spiral.engines.loading import ModelConfig
from spiral.engines.torch.checkpoint_io import save_trained
from spiral.engines.torch.loading import _load_adapter, load_model_and_tokenizer
from spiral.engines.torch.snapshots import TRAINED, save_snapshot, take_snapshot

HUB_ID = "SomeOrg/a-model-that-is-not-here"


def test_adapters_named_by_hub_id_never_ask_the_hub(
    tiny_llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import peft.utils.save_and_load as peft_io

    asked: list[str] = []
    monkeypatch.setattr(peft_io, "check_file_exists_on_hf_hub", lambda repo, *_: asked.append(repo))
    model, _ = load_model_and_tokenizer(ModelConfig(str(tiny_llama), lora_rank=4))
    model.peft_config[TRAINED].base_model_name_or_path = HUB_ID
    take_snapshot(model, "member")
    save_snapshot(model, "member", tmp_path / "member")
    save_trained(model, tmp_path / "trained")
    config = json.loads((tmp_path / "trained" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == HUB_ID
    base, _ = load_model_and_tokenizer(ModelConfig(str(tiny_llama), lora_rank=0))
    _load_adapter(base, str(tmp_path / "trained"))
    assert asked == []
