"""Optimizer state and weight files in safetensors + JSON: no pickle anywhere.

A torch optimizer's `state_dict()` is a nest of tensors (per-parameter moments, step
counts) and plain values (hyper-parameters). We write the tensors to
`optimizer.safetensors`, keyed `"<parameter name>/<state key>"` (parameter NAMES, not
positions, so a checkpoint survives a change in parameter order), and everything else to
`optimizer.json`, together with free-form `extra` values (the learner's version...).

`load_weight_files(folder)` reads a transformers folder's weights (single or sharded
`model.safetensors`) for loading in place; `save_trained` / `load_weights` write and read
a model's trained weights as a PEFT adapter folder (LoRA) or a full model folder. The
learner reads them under `manifest.damaged_if_unreadable`, which names a damaged file.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

import spiral.engines.torch.snapshots as snapshots
from spiral.engines.base import HOSTED_POINTER

OPTIMIZER_TENSORS = "optimizer.safetensors"
OPTIMIZER_JSON = "optimizer.json"


def save_optimizer(
    optimizer: torch.optim.Optimizer,
    names: list[str],
    folder: Path,
    extra: dict[str, Any] | None = None,
) -> None:
    """Write `optimizer`'s state; `names[i]` names the i-th parameter of its param groups."""
    save_optimizer_state(optimizer.state_dict(), names, folder, extra)


def save_optimizer_state(
    state: dict[str, Any], names: list[str], folder: Path, extra: dict[str, Any] | None = None
) -> None:
    """Write an optimizer's `state_dict()` (or one gathered whole from sharded ranks)."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, per_param in state["state"].items():
        name = names[index]
        for key, value in per_param.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{name}/{key}"] = value.detach().to("cpu").contiguous()
            else:
                scalars.setdefault(name, {})[key] = value
    groups = [
        {**{k: v for k, v in g.items() if k != "params"}, "params": [names[i] for i in g["params"]]}
        for g in state["param_groups"]
    ]
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / OPTIMIZER_TENSORS))
    meta = {"param_groups": groups, "scalars": scalars, "extra": extra or {}}
    (folder / OPTIMIZER_JSON).write_text(json.dumps(meta, indent=1) + "\n")


def _tuples(value: Any) -> Any:
    # JSON has no tuples; torch optimizers keep e.g. betas as tuples.
    return tuple(value) if isinstance(value, list) else value


def load_optimizer(
    optimizer: torch.optim.Optimizer, names: list[str], folder: Path
) -> dict[str, Any]:
    """Restore state written by `save_optimizer` into `optimizer`; return its `extra`."""
    meta = json.loads((folder / OPTIMIZER_JSON).read_text())
    tensors = load_file(str(folder / OPTIMIZER_TENSORS))
    index_of = {name: i for i, name in enumerate(names)}
    saved_names = {n for g in meta["param_groups"] for n in g["params"]}
    if saved_names != set(names):
        missing, unknown = set(names) - saved_names, saved_names - set(names)
        raise ValueError(
            f"optimizer checkpoint in {folder} does not match this model's trainable "
            f"parameters (missing {sorted(missing)[:3]}..., unknown {sorted(unknown)[:3]}...); "
            "load it into a learner built with the same model and LoRA settings"
        )
    state: dict[int, dict[str, Any]] = {}
    for key, tensor in tensors.items():
        name, _, field = key.rpartition("/")
        state.setdefault(index_of[name], {})[field] = tensor
    for name, values in meta["scalars"].items():
        state.setdefault(index_of[name], {}).update(values)
    groups = [
        {
            **{k: _tuples(v) for k, v in g.items() if k != "params"},
            "params": [index_of[n] for n in g["params"]],
        }
        for g in meta["param_groups"]
    ]
    optimizer.load_state_dict({"state": state, "param_groups": groups})
    return dict(meta["extra"])


def load_weight_files(folder: Path) -> dict[str, torch.Tensor]:
    """All tensors of a transformers folder's `model.safetensors` (sharded or not)."""
    single = folder / "model.safetensors"
    if single.is_file():
        return load_file(str(single))
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        raise FileNotFoundError(
            f"{folder} has neither model.safetensors nor model.safetensors.index.json; "
            "is it a checkpoint written by TorchLearner.save?"
        )
    shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    weights: dict[str, torch.Tensor] = {}
    for shard in shards:
        weights.update(load_file(str(folder / shard)))
    return weights


def load_full_weights(model: Any, folder: Path) -> None:
    """A transformers folder's full weights into `model` (in place); ValueError if the
    names do not match. A tied output head is saved once, under the input embedding's name."""
    weights = load_weight_files(folder)
    result = model.load_state_dict(weights, strict=False)
    shared = model.get_input_embeddings().weight
    tied = {n for n, p in model.named_parameters(remove_duplicate=False) if p is shared}
    missing = [k for k in result.missing_keys if k not in tied]
    if missing or result.unexpected_keys:
        raise ValueError(
            f"weights in {folder} do not match the model: missing {missing[:3]}, "
            f"unexpected {result.unexpected_keys[:3]}"
        )


def is_peft(model: Any) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def save_trained(model: Any, path: Path, weights: dict[str, torch.Tensor] | None = None) -> None:
    """The trained weights only: a PEFT adapter folder with LoRA (its trained adapter, not
    pool members), else the full model. `weights`: these instead of the model's own, by
    parameter name (an FSDP learner's, gathered whole)."""
    if is_peft(model):
        model.save_pretrained(
            str(path), selected_adapters=[snapshots.TRAINED], state_dict=weights, **snapshots.NO_HUB
        )
    else:
        model.save_pretrained(str(path), state_dict=weights)


def load_weights(model: Any, folder: Path) -> None:
    """A PEFT adapter or full weights from `folder` into `model` (in place); ValueError
    where the folder's kind (adapter or full) is not the model's."""
    if (folder / HOSTED_POINTER).is_file():
        raise ValueError(
            f"{folder} points to weights held by the Tinker service (an engine=tinker run); "
            "they are not here to load: continue that run with engine=tinker"
        )
    if (folder / "adapter_model.safetensors").is_file():
        from peft import set_peft_model_state_dict

        if not is_peft(model):
            raise ValueError(
                f"{folder} holds a LoRA adapter but this learner does full fine-tuning; build "
                "it with lora_rank > 0, or with ModelConfig(model=<that folder>)"
            )
        weights = load_file(str(folder / "adapter_model.safetensors"), device=str(model.device))
        result: Any = set_peft_model_state_dict(model, weights)
        unexpected = list(result.unexpected_keys)
        if unexpected:
            raise ValueError(f"adapter in {folder} has unexpected keys {unexpected[:3]}")
        return
    if is_peft(model):
        raise ValueError(
            f"{folder} holds full model weights but this learner trains LoRA; build it with "
            "lora_rank=0 to resume full fine-tuning"
        )
    load_full_weights(model, folder)


def export_merged(model: Any, tokenizer: Any, path: Path) -> None:
    """A standalone model folder (LoRA merged into a copy of the base) + tokenizer."""
    if is_peft(model):
        # A copy, so the live model keeps its adapter (costs one model's memory briefly).
        model = copy.deepcopy(model).merge_and_unload()
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))


@contextlib.contextmanager
def live_weights_kept(named: Sequence[tuple[str, torch.nn.Parameter]]) -> Iterator[None]:
    """Whatever the block writes into the parameters, they hold their values again after."""
    live = {n: p.detach().clone() for n, p in named}
    try:
        yield
    finally:
        with torch.no_grad():
            for n, p in named:
                p.copy_(live[n])
