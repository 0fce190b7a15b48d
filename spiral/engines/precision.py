"""The LoRA path's precision: adapters kept in fp32, computed in the base model's dtype.

PEFT keeps LoRA weights in fp32 over a bf16 base model (their optimizer state and small
updates need it) and therefore casts every LoRA layer's input to fp32, runs the two
low-rank products in fp32, adds them to the bf16 base output as fp32 and casts the sum
back: per layer and token, four passes over the activations besides the matmuls. In a
make-train or TicTacToe learner step on this project's CPU that was about a quarter of
the time (`docs/results.md`, "Precision").

`lora_compute(model)` runs a block the way mixed-precision training usually does:
autocast to the base model's dtype, with PEFT's input casting off, so each LoRA product
runs in bf16 on the bf16 activations (the fp32 adapter weights are cast, a few KB per
layer) and the gradients still reach the fp32 weights. The sum with the base output was
already rounded to bf16 before; what changes is that the low-rank products round to bf16
too. The sampler and the learner both compute under it, so their log-probs agree as
before (tested). It does nothing for fp32 models, for models without LoRA, or where the
adapter already has the base's dtype.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


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


@contextlib.contextmanager
def lora_compute(model: Any) -> Iterator[None]:
    """Compute the block's LoRA products in the base model's dtype (module docstring)."""
    if not mixed_lora(model):
        yield
        return
    from peft.helpers import disable_input_dtype_casting

    base = model.get_output_embeddings().weight.dtype
    with torch.autocast(model.device.type, dtype=base), disable_input_dtype_casting(model):
        yield
