"""Frozen snapshots of the trained LoRA adapter: the members of a population-play pool.

A snapshot is a second PEFT adapter over the one base model in memory (not a merged copy
of the model): `take_snapshot` copies the trained adapter ("default") into a new adapter
with its own name, frozen; `active_adapter` switches the model to a member for a block of
sampling and back. Switching costs nothing but a flag per LoRA layer, so members are
switched per batch of turns. One member costs one adapter's weights (LoRA r16 on every
linear layer of the 135M embedded model: 4.9M parameters, 19.5 MB in fp32).

On disk a member is a folder holding `adapter_model.safetensors` (the adapter's own
weights, PEFT's key names) and `adapter_config.json`; `load_snapshot` restores it
bit-exactly under its name, which is how a resumed run rebuilds its pool.

PEFT's `set_adapter` also makes the active adapter the trainable one, so every switch
ends by activating "default" again (in a `finally`), which restores exactly the
trainable set the optimizer holds.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TRAINED = "default"  # PEFT's name for the adapter being trained
# PEFT's state-dict writer asks the Hub whether the base model's vocabulary changed when the
# adapter names a hub id ("auto"); Spiral never resizes the vocabulary nor goes online.
NO_HUB: dict[str, Any] = {"save_embedding_layers": False}
WEIGHTS_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"


class SnapshotError(RuntimeError):
    """A snapshot that cannot be taken or loaded (no LoRA adapter, a name in use)."""


def _require_lora(model: Any) -> None:
    if not hasattr(model, "peft_config") or TRAINED not in model.peft_config:
        raise SnapshotError(
            "this snapshot is a LoRA adapter over one base model; train with lora_rank > 0 "
            "(full fine-tuning's pool members are model folders: engines/torch/full_members.py)"
        )


def _check_name(model: Any, name: str) -> None:
    if not name or name == TRAINED or "." in name:
        raise SnapshotError(f"bad snapshot name {name!r} (not empty, no '.', not {TRAINED!r})")
    if name in model.peft_config:
        raise SnapshotError(f"a snapshot named {name!r} already exists")


def take_snapshot(model: Any, name: str) -> None:
    """Copy the trained adapter's current weights into a new frozen adapter `name`."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    _require_lora(model)
    _check_name(model, name)
    weights = {k: v.detach().clone() for k, v in get_peft_model_state_dict(model, **NO_HUB).items()}
    model.add_adapter(name, model.peft_config[TRAINED])
    set_peft_model_state_dict(model, weights, adapter_name=name)
    model.set_adapter(TRAINED)  # add_adapter leaves "default" active; make sure


def save_snapshot(model: Any, name: str, folder: Path) -> None:
    """Write member `name` to `folder` as a PEFT adapter folder (PEFT's own writer, into
    a temporary folder renamed into place)."""
    folder = Path(folder)
    tmp = folder.with_name(f".tmp-{folder.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp), selected_adapters=[name], **NO_HUB)  # tmp/<name>/
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp / name, folder)
    shutil.rmtree(tmp, ignore_errors=True)


def load_snapshot(model: Any, name: str, folder: Path) -> None:
    """Member `name` from a folder written by `save_snapshot` (bit-exact)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    _require_lora(model)
    _check_name(model, name)
    path = Path(folder) / WEIGHTS_FILE
    if not path.is_file():
        raise SnapshotError(f"pool member {name!r}: {path} is missing")
    weights = load_file(str(path), device=str(model.device))
    model.add_adapter(name, model.peft_config[TRAINED])
    result: Any = set_peft_model_state_dict(model, weights, adapter_name=name)
    if list(result.unexpected_keys):
        model.delete_adapter(name)
        raise SnapshotError(f"pool member {name!r} in {folder} does not fit this model")
    model.set_adapter(TRAINED)


def drop_snapshot(model: Any, name: str) -> None:
    """Free member `name`'s weights (its folder on disk is left to the caller)."""
    if name in getattr(model, "peft_config", {}) and name != TRAINED:
        from spiral.engines.torch.decode import drop_sampling_weights

        drop_sampling_weights(model, name)
        model.delete_adapter(name)
        model.set_adapter(TRAINED)


def snapshot_names(model: Any) -> list[str]:
    return [n for n in getattr(model, "peft_config", {}) if n != TRAINED]


@contextlib.contextmanager
def active_adapter(model: Any, name: str | None) -> Iterator[None]:
    """Inside the block the model computes with member `name` (None: the trained one)."""
    if name is None or name == TRAINED:
        yield
        return
    if name not in model.peft_config:
        raise SnapshotError(f"no pool member named {name!r}")
    model.set_adapter(name)
    try:
        yield
    finally:
        model.set_adapter(TRAINED)
