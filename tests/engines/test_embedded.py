"""The embedded SmolLM2-135M-Instruct: the wheel's GGUF is found; conversion (slow) works."""

from __future__ import annotations

from pathlib import Path

import pytest

from spiral.engines.base import SamplingParams
from spiral.engines.embedded import ensure_embedded_model, find_embedded_gguf
from spiral.engines.loading import ModelConfig, resolve_model_path
from spiral.engines.torch.loading import load_model_and_tokenizer
from spiral.engines.torch.sampler import TorchSampler


def test_wheel_gguf_is_found() -> None:
    gguf = find_embedded_gguf()
    assert gguf.suffix == ".gguf" and gguf.stat().st_size > 50_000_000


def test_existing_cache_is_reused_without_conversion(tmp_path: Path) -> None:
    target = tmp_path / "models" / "smollm2-135m-instruct"
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    (target / "tokenizer_config.json").write_text("{}")
    assert ensure_embedded_model(tmp_path) == target


@pytest.mark.slow
def test_embedded_model_answers_a_chat_prompt() -> None:
    folder = ensure_embedded_model()
    assert ensure_embedded_model() == folder  # second call reuses the cache
    assert resolve_model_path("embedded") == str(folder)
    model, tok = load_model_and_tokenizer(ModelConfig("embedded", lora_rank=0))
    assert tok.chat_template and "<|im_start|>" in tok.chat_template
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        tokenize=True,
    )["input_ids"]
    out = TorchSampler(model, tok).sample([prompt], SamplingParams(max_tokens=20, temperature=0.0))
    assert "Paris" in out[0].text
    assert out[0].stop_reason == "eos"
