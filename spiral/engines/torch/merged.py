"""Sampling with the LoRA adapter merged into the base weights.

A PEFT LoRA layer computes `base(x) + B(A(x)) * scaling`: per adapted linear and decode
step, two more matrix products and an addition, each a separate kernel. On a GPU the
decode step is bound by launching kernels, and the adapters took the forward from 30 to
50 ms on an H100 (Qwen3-0.6B shape, 16 rows; `docs/results.md`, "The torch engine on an
H100"); on this project's CPU from 106 to 139 ms (the embedded model). Sampling needs no
gradient, so it can run on `W + scaling * B @ A` instead: the same function, one product.

`MergedWeights` holds, for one model, the merged weight of every adapted linear for one
adapter, computed in fp32 and rounded once to the base dtype. It is computed again only
when the adapter's weights change: the key is every LoRA weight's storage and version
counter (`Tensor._version`, bumped by each in-place update such as an optimizer step), so
a sampler made after an update never sees the old merge. The merge of an older version is
dropped when a newer one is made, and at most `MAX_MERGED` adapters (the trained one and
the pool member sampled last) are held, so the cost is one or two extra copies of the
adapted weights (the embedding and head are not adapted); the learner frees the trained
adapter's merge when it learns. `merged(model, adapter)` is the
context in which the model computes with them: each adapted layer's base weight swapped
for its merged one (a pointer swap) and its adapters switched off (PEFT's per-layer flag),
both undone on exit.

Where it stands aside (returns a no-op context): a model without LoRA, adapters other
than plain LoRA on linear layers (DoRA and other variants, embedding adapters), base
weights that are not plain floating-point tensors (quantized layers). It is for
inference only: nothing flows back to the adapters through the merged weights, so callers
enter it outside `torch.inference_mode` (the merge is made under `no_grad` and cached
across calls) and run their forwards without autograd inside.

Rounding: in bf16 the merged weight rounds `W + dW` once where the unmerged path rounds
`base(x)` and the low-rank product separately, so the sampler's log-probs move by about
bf16's resolution against the learner's; the engines' log-prob agreement tests hold it
within their stated bounds (fp32: 1e-4; bf16: 0.05).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import torch

_SLOT = "_spiral_merged_lora"
MAX_MERGED = 2  # the trained adapter and the pool member sampled last


def _lora_layers(model: Any, adapter: str) -> list[Any] | None:
    """The model's LoRA layers that carry `adapter`; None where merging stands aside."""
    if not hasattr(model, "peft_config"):
        return None
    from peft.tuners.lora import Linear as LoraLinear
    from peft.tuners.lora import LoraLayer

    layers = []
    for module in model.modules():
        if not isinstance(module, LoraLayer):
            continue
        if adapter not in module.lora_A:
            continue
        if type(module) is not LoraLinear:  # embedding/conv adapters, quantized bases
            return None
        if getattr(module, "use_dora", {}).get(adapter, False):
            return None
        if getattr(module, "lora_variant", {}).get(adapter) is not None:  # DoRA and kin
            return None
        weight = module.get_base_layer().weight
        if not isinstance(weight, torch.Tensor) or not weight.is_floating_point():
            return None
        layers.append(module)
    return layers or None


def _key(layers: list[Any], adapter: str) -> tuple[Any, ...]:
    parts: list[Any] = [adapter]
    for layer in layers:
        for p in (layer.lora_A[adapter].weight, layer.lora_B[adapter].weight):
            parts.append((p.data_ptr(), p._version))
        parts.append(layer.scaling[adapter])
    return tuple(parts)


def merged_weights(model: Any, adapter: str, layers: list[Any]) -> list[torch.Tensor]:
    """Each layer's `W + scaling * B @ A` for `adapter`, in fp32 rounded once to W's dtype;
    cached on the model until the adapter's weights change (`MAX_MERGED` adapters, the
    least recently used dropped first)."""
    key = _key(layers, adapter)
    slots: OrderedDict[str, tuple[Any, list[torch.Tensor]]] = model.__dict__.setdefault(
        _SLOT, OrderedDict()
    )
    cached = slots.get(adapter)
    if cached is not None and cached[0] == key:
        slots.move_to_end(adapter)
        return cached[1]
    slots.pop(adapter, None)  # free an old merge before making the new one
    while len(slots) >= MAX_MERGED:
        slots.popitem(last=False)
    out = []
    with torch.no_grad():
        for layer in layers:
            base = layer.get_base_layer().weight
            a = layer.lora_A[adapter].weight.float()
            b = layer.lora_B[adapter].weight.float()
            delta = b @ a
            if layer.fan_in_fan_out:
                delta = delta.T
            out.append((base.float() + delta * layer.scaling[adapter]).to(base.dtype))
    slots[adapter] = (key, out)
    return out


def drop_merged(model: Any, adapter: str | None = None) -> None:
    """Free the cached merge of `adapter` (None: of every adapter)."""
    drop_slot(model, _SLOT, adapter)


def drop_slot(model: Any, slot: str, adapter: str | None) -> None:
    """Drop `adapter`'s entry (None: every entry) of a per-adapter cache kept on the model
    under `slot` (this module's merges, decode.py's packed weights)."""
    slots = model.__dict__.get(slot)
    if slots is not None:
        if adapter is None:
            slots.clear()
        else:
            slots.pop(adapter, None)


@contextlib.contextmanager
def merged(model: Any, adapter: str, enabled: bool = True) -> Iterator[bool]:
    """Inside the block `model` computes with `adapter` merged into its base weights;
    yields whether it does (False: the model runs as it is, as with `enabled=False`; see
    the module docstring)."""
    layers = _lora_layers(model, adapter) if enabled else None
    if layers is None:
        yield False
        return
    weights = merged_weights(model, adapter, layers)
    originals = [layer.get_base_layer().weight.data for layer in layers]
    # PEFT's flag, set directly: its `enable_adapters(True)` would also reset which
    # adapters require gradients (a pool member's would turn trainable).
    flags = [layer._disable_adapters for layer in layers]
    for layer, weight in zip(layers, weights, strict=True):
        layer.get_base_layer().weight.data = weight
        layer._disable_adapters = True
    try:
        yield True
    finally:
        for layer, weight, flag in zip(layers, originals, flags, strict=True):
            layer.get_base_layer().weight.data = weight
            layer._disable_adapters = flag
