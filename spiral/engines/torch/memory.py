"""How many tokens a learner micro-batch may hold on a GPU (`micro_batch_tokens=0`).

A training forward keeps each layer's activations for the backward pass, so a
micro-batch's memory grows with its tokens. The budget is measured at the start of each
learning step, once the samplers' copies of the trained weights are freed: what the
device has free (with what torch's allocator holds unused), less what the step will
still allocate (`step_reserve`: the gradients, AdamW's moments before its first step,
autocast's compute-dtype copies of fp32 master weights), the head's chunk of logits
(`head.py`) and headroom, divided by the activations of one token. Everything else
resident then (a frozen reference, pool members, prefix caches) is counted because it is
allocated. The activations per token are an estimate from the model's shape, on the safe
side:

- per layer, in the compute dtype: the attention block's norm output, q, k, v and
  attention output, the residual, the MLP's norm output, gate, up, activation and their
  product (`6 hidden + 2 q-width + 2 kv-width + 4 intermediate` values), plus the two
  RMS norms' fp32 inputs (`2 x 4 x hidden` bytes);
- with gradient checkpointing, each layer keeps only its input (`hidden` values) and one
  layer's activations exist at a time.

Only 3/4 of the rest is planned for (the caching allocator's slack and fragmentation),
in multiples of `STEP` tokens so that a steady run keeps one size. The estimate can
still fall short (rows that continue a shared prefix needed more than it counts on an
H200): a step that runs out of memory is run again with micro-batches half as large
(`smaller_after_oom`), and that size stays the cap for the steps after it. Only where no
gradient was held before the call (one call per step; the async loop's later calls per
staleness stop instead, with the size to set). On a CPU the budget
stays `CPU_TOKENS`: memory there is the machine's, and speed, not memory, sets the size.
"""

from __future__ import annotations

from typing import Any

import torch

from spiral.engines.torch.precision import compute_dtype

GIB = 1 << 30
HEADROOM = GIB  # the CUDA context, allocator slack
CPU_TOKENS = 4096
STEP = 1024  # budgets are multiples of this
MAX_TOKENS = 65536  # above this a micro-batch gains nothing (the GPU is long saturated)
HEAD_CHUNK_BYTES = 256 << 20  # head.py's chunk of full-vocabulary logits, with its grad


def _local_numel(p: torch.Tensor) -> int:
    """Elements this process holds of `p` (its shard, for a sharded parameter)."""
    to_local = getattr(p, "to_local", None)
    return int(to_local().numel()) if callable(to_local) else int(p.numel())


def trainable_reserve(model: Any) -> int:
    """Bytes a learner still allocates for its trainable weights at the first step: fp32
    gradients and AdamW's two moments."""
    return 12 * sum(_local_numel(p) for p in model.parameters() if p.requires_grad)


def step_reserve(model: Any, optimizer_made: bool) -> int:
    """Bytes a learning step allocates besides activations: the gradients (freed after
    every step), AdamW's two fp32 moments until its first step made them, and autocast's
    compute-dtype copy of each fp32 master weight (full fine-tuning on a GPU)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    grads = sum(_local_numel(p) * p.element_size() for p in trainable)
    moments = 0 if optimizer_made else sum(8 * _local_numel(p) for p in trainable)
    dtype = compute_dtype(model)
    copies = 0
    if dtype is not None:
        copies = sum(_local_numel(p) * dtype.itemsize for p in trainable)
    return grads + moments + copies


def activation_bytes_per_token(config: Any, dtype_bytes: int, checkpointing: bool) -> int:
    """Activations one token keeps for the backward pass (module docstring)."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    values = (
        6 * hidden + 2 * heads * head_dim + 2 * kv_heads * head_dim + 4 * config.intermediate_size
    )
    per_layer = values * dtype_bytes + 2 * 4 * hidden
    if checkpointing:
        return layers * hidden * dtype_bytes + per_layer
    return layers * per_layer


def micro_batch_budget(free: int, reserve: int, per_token: int) -> int:
    """Tokens per micro-batch with `free` bytes free now and `reserve` still to come;
    a multiple of `STEP` between `STEP` and `MAX_TOKENS`."""
    usable = 0.75 * (free - reserve - HEAD_CHUNK_BYTES - HEADROOM)
    tokens = int(usable // per_token) // STEP * STEP
    return max(STEP, min(MAX_TOKENS, tokens))


def auto_micro_batch_tokens(model: Any, checkpointing: bool, optimizer_made: bool) -> int:
    """The budget for `model` where it lives, now: sized to the free memory on CUDA,
    `CPU_TOKENS` elsewhere."""
    weight = model.get_output_embeddings().weight
    device = weight.device
    if device.type != "cuda":
        return CPU_TOKENS
    dtype = compute_dtype(model) or weight.dtype
    free, _ = torch.cuda.mem_get_info(device)
    free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    per_token = activation_bytes_per_token(model.config, dtype.itemsize, checkpointing)
    return micro_batch_budget(free, step_reserve(model, optimizer_made), per_token)


def smaller_after_oom(tokens: int) -> int | None:
    """The micro-batch budget to run a learning step again with after micro-batches of
    `tokens` ran out of GPU memory: half, in multiples of `STEP`; None below `2 * STEP`."""
    if tokens < 2 * STEP:
        return None
    return tokens // 2 // STEP * STEP
