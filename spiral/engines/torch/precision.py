"""Precision: what is trained stays in fp32, what is computed runs in the compute dtype.

Two cases, one entry point (`model_compute(model)`, which every forward of the sampler
and the learner runs under):

- Full fine-tuning with a half-precision compute dtype (`dtype=auto` on CUDA, or
  `dtype=bfloat16`): the loader keeps the weights in fp32 (they are the master weights,
  and AdamW's moments take their dtype) and marks the model with its compute dtype
  (`set_compute_dtype`); its forwards run under `torch.autocast`, so the products run in
  bf16 from bf16 copies of the weights (made once per autocast block) and the updates
  accumulate in fp32. Kept in bf16 instead, an update smaller than half a unit in the
  last place of its weight is lost: at lr 1e-6 (SPIRAL's full fine-tuning rate) Adam moves
  a weight by ~1e-6, and bf16's spacing near 0.02 is 1.2e-4, so nearly every update
  rounds to nothing (tested).
- LoRA over a half-precision base (below): the adapters are fp32, their products run in
  the base's dtype.

A model that is only sampled (eval, play, serve, an async actor) or the KL's frozen
reference loads in the compute dtype itself (`loading.load_model_and_tokenizer` with
`trained=False`). Full fine-tuning under autocast decodes with the model's own forward
(the packed decode step stands aside: `decode.py`), and its checkpoints hold the fp32
weights. Sampler and learner agree to 1e-4 in log-prob in fp32 and to 0.05 in bf16; the
test suite runs `dtype=auto` as fp32.

The LoRA path's precision: adapters kept in fp32, computed in the base model's dtype.

PEFT keeps LoRA weights in fp32 over a bf16 base model (their optimizer state and small
updates need it) and therefore casts every LoRA layer's input to fp32, runs the two
low-rank products in fp32, adds them to the bf16 base output as fp32 and casts the sum
back: per layer and token, four passes over the activations besides the matmuls. In a
make-train or TicTacToe learner step on this project's CPU that was about a quarter of
the time (`docs/results.md`, "Precision").

`lora_compute(model)` computes each LoRA product in the base model's dtype on the
activations as they come: for the block's duration, PEFT's input casting is off and each
adapter's two `nn.Linear`s multiply by their fp32 weights cast to the base dtype (a few KB
a layer; the cast is differentiable, so the gradients still reach the fp32 weights). The
sum with the base output was already rounded to bf16 before; what changes is that the
low-rank products round to bf16 too. Only the adapters' own linears change: nothing else
in the model (an fp32 router, an fp32 head) is touched, which a block-wide
`torch.autocast` (this module's first version) would have downcast. The sampler and the
learner both compute under it, so their log-probs agree as before (tested).

It does nothing for fp32 models, for models without LoRA, where the adapter already has
the base's dtype, for adapter kinds other than plain LoRA on linear layers (DoRA and other
variants, embedding adapters), and under activation checkpointing, whose recomputation in
the backward pass runs outside the block and would compute the products in another dtype.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

_COMPUTE = "_spiral_compute_dtype"


def set_compute_dtype(model: Any, dtype: torch.dtype) -> None:
    """Mark a model whose fp32 weights compute in `dtype` under autocast."""
    model.__dict__[_COMPUTE] = dtype


def compute_dtype(model: Any) -> torch.dtype | None:
    """The autocast dtype a full fine-tuning model computes in; None for a model that
    computes in its weights' dtype."""
    return model.__dict__.get(_COMPUTE)


def autocast_for(model: Any) -> contextlib.AbstractContextManager[Any]:
    """`torch.autocast` to the model's compute dtype, or a block that does nothing."""
    dtype = compute_dtype(model)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(model.device.type, dtype=dtype)


@contextlib.contextmanager
def model_compute(model: Any) -> Iterator[None]:
    """Compute the block's forwards of `model` in its compute dtype (module docstring)."""
    if compute_dtype(model) is not None:
        with autocast_for(model):
            yield
        return
    with lora_compute(model):
        yield


def _lora_dtypes(model: Any) -> tuple[torch.dtype, torch.dtype] | None:
    """(base dtype, adapter dtype) of a PEFT LoRA model; None for anything else."""
    if not hasattr(model, "peft_config"):
        return None
    base = model.get_output_embeddings().weight.dtype
    adapter = next((p.dtype for n, p in model.named_parameters() if "lora_" in n), None)
    return None if adapter is None else (base, adapter)


def mixed_lora(model: Any) -> bool:
    """Whether `model` is a LoRA model with a half-precision base and fp32 adapters."""
    dtypes = _lora_dtypes(model)
    if dtypes is None:
        return False
    base, adapter = dtypes
    return base in (torch.bfloat16, torch.float16) and adapter == torch.float32


def _lora_parts(model: Any) -> tuple[list[Any], list[torch.nn.Linear]] | None:
    """The LoRA layers and their adapters' `nn.Linear`s, in one pass over the modules
    (this runs at every sampler call and learner micro-batch); None where the patch
    stands aside: activation checkpointing, or an adapter of another kind (a variant such
    as DoRA, an embedding or convolution adapter)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers: list[Any] = []
    linears: list[torch.nn.Linear] = []
    for module in model.modules():
        if vars(module).get("gradient_checkpointing", False):  # a plain attribute: fast
            return None
        if not isinstance(module, BaseTunerLayer):
            continue
        if getattr(module, "lora_variant", None) or getattr(module, "lora_embedding_A", None):
            return None
        layers.append(module)
        for part in ("lora_A", "lora_B"):
            for linear in getattr(module, part, {}).values():
                if type(linear) is not torch.nn.Linear:
                    return None
                linears.append(linear)
    return layers, linears


def _linear_in(dtype: torch.dtype) -> Any:
    def forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.to(dtype)
        return F.linear(x.to(dtype), self.weight.to(dtype), bias)

    return forward


@contextlib.contextmanager
def lora_compute(model: Any) -> Iterator[None]:
    """Compute the block's LoRA products in the base model's dtype (module docstring)."""
    layers, linears = (_lora_parts(model) if mixed_lora(model) else None) or ([], [])
    # Re-entered (the sampler scoring inside a learner block): the outer block owns them.
    linears = [linear for linear in linears if "forward" not in vars(linear)]
    if not linears:
        yield
        return
    forward = _linear_in(model.get_output_embeddings().weight.dtype)
    casting = [layer.cast_input_dtype_enabled for layer in layers]
    for layer in layers:  # PEFT's input cast to the adapter's fp32: off
        layer.cast_input_dtype_enabled = False
    for linear in linears:
        linear.forward = types.MethodType(forward, linear)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for linear in linears:
            del linear.forward
        for layer, enabled in zip(layers, casting, strict=True):
            layer.cast_input_dtype_enabled = enabled
