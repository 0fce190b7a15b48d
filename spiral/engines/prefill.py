"""Shared-prefix prefill, used by the sampler (then decode) and the learner (then loss).

`prefill(model, seqs, max_prefix, pad_id)` runs the rows' longest common token prefix
(at most `max_prefix` tokens) ONCE with batch 1, repeats its KV cache over the rows, and
runs the differing suffixes as one left-padded batch (layout `[prefix][pads][suffix]`,
explicit attention mask and position ids, so pads are invisible and each row sees
positions 0..n-1 exactly as an unpadded forward). Nothing here disables autograd: under
`torch.inference_mode` it is the sampler's prefill; with gradients on, the gradient of
every row flows back through the one shared prefix computation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


def common_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for other in seqs[1:]:
        k = 0
        while k < n and other[k] == first[k]:
            k += 1
        n = k
    return n


@dataclass
class Prefill:
    """A chunk after prefill: cache, 2-D attention mask, next positions, last outputs."""

    cache: Any
    mask_BK: torch.Tensor
    next_pos_B: torch.Tensor
    out: Any  # the model output of the suffix forward
    suffix_len: int
    prefix_len: int
    computed_tokens: int


def prefill(
    model: Any, seqs: Sequence[Sequence[int]], max_prefix: int, pad_id: int, **kwargs: Any
) -> Prefill:
    """Run `seqs` into a fresh KV cache, sharing their common prefix (<= max_prefix)."""
    from transformers import DynamicCache

    device = model.device
    rows = len(seqs)
    cache = DynamicCache(config=model.config)
    prefix = min(common_prefix_len(seqs), max_prefix) if rows > 1 else 0
    computed = 0
    if prefix > 0:
        ids_1P = torch.tensor([list(seqs[0][:prefix])], device=device)
        model(input_ids=ids_1P, past_key_values=cache, use_cache=True, logits_to_keep=1)
        cache.batch_repeat_interleave(rows)
        computed += prefix
    lens = [len(s) - prefix for s in seqs]
    width = max(lens)
    ids_BS = torch.full((rows, width), pad_id, dtype=torch.long)
    real_BS = torch.zeros((rows, width), dtype=torch.long)
    for i, (seq, n) in enumerate(zip(seqs, lens, strict=True)):
        ids_BS[i, width - n :] = torch.tensor(list(seq[prefix:]), dtype=torch.long)
        real_BS[i, width - n :] = 1
    pos_BS = (prefix + torch.cumsum(real_BS, dim=1) - 1).clamp(min=0)
    mask_BK = torch.cat([torch.ones((rows, prefix), dtype=torch.long), real_BS], dim=1)
    out = model(
        input_ids=ids_BS.to(device),
        attention_mask=mask_BK.to(device),
        position_ids=pos_BS.to(device),
        past_key_values=cache,
        use_cache=True,
        **kwargs,
    )
    computed += sum(lens)
    next_pos_B = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    return Prefill(cache, mask_BK.to(device), next_pos_B.to(device), out, width, prefix, computed)
