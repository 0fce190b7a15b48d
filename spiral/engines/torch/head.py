"""The output head over the positions a learner step needs, a chunk of positions at a time.

A learner step needs, at every trained position, the target's log-prob, the entropy of
the (tempered, constrained) distribution and its KL to a magnet. Each comes from a
full-vocabulary fp32 log-distribution, and autograd keeps several such tensors per
position for the backward pass (the logits, their log-softmax, the entropy's and KL's
products): with Qwen's 152k-token vocabulary, 4,096 positions would hold ~2.5 GB per
copy. `head_terms` computes them `rows` positions at a time under activation
checkpointing (`torch.utils.checkpoint`, non-reentrant): only one chunk's distributions
exist at once, and the backward pass recomputes each chunk's head product (one more
matmul of the head per trained position, and the magnet's, which is cheap next to the
model). Steps whose positions fit in one chunk (every make-train step: SmolLM2's 49k
vocabulary, `LOGIT_CHUNK_BYTES` of fp32 per copy) compute exactly as without chunks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from spiral.algo.regularizers import entropy_and_kl, move_floor_deficit

# One chunk's fp32 log-distributions: 1,365 positions of a 49k vocabulary, 441 of 152k.
LOGIT_CHUNK_BYTES = 256 * 2**20

Dists = Callable[[Tensor, slice], Tensor]  # (hidden states of positions sl, sl) -> log-dists
Magnet = Callable[[slice], Tensor]  # positions sl -> the magnet's log-dists (no gradient)


@dataclass(frozen=True)
class Terms:
    """Per position: the target's log-prob, the entropy, the KL to the magnet (None
    without a magnet), the move floor's deficit (None without a floor)."""

    values_N: Tensor
    entropy_N: Tensor
    kl_N: Tensor | None
    floor_N: Tensor | None = None


def chunk_rows(vocab_size: int, budget_bytes: int = LOGIT_CHUNK_BYTES) -> int:
    """Positions per chunk: fp32 log-distributions of at most `budget_bytes`."""
    return max(1, budget_bytes // (4 * vocab_size))


def _terms(
    dists: Dists,
    hidden_NH: Tensor,
    sl: slice,
    targets_N: Tensor,
    magnet: Magnet | None,
    floor: float,
) -> tuple[Tensor, ...]:
    """(values, entropy[, kl][, floor deficit]): the optional terms only where asked for."""
    logp_NV = dists(hidden_NH, sl)
    values_N = logp_NV.gather(1, targets_N[sl].unsqueeze(1)).squeeze(1)
    magnet_NV = None
    if magnet is not None:
        with torch.no_grad():
            magnet_NV = magnet(sl)
    entropy_N, kl_N = entropy_and_kl(logp_NV, magnet_NV)
    out = (values_N, entropy_N) if kl_N is None else (values_N, entropy_N, kl_N)
    return out + (move_floor_deficit(logp_NV, floor),) if floor > 0 else out


def head_terms(
    dists: Dists,
    hidden_NH: Tensor,
    targets_N: Tensor,
    magnet: Magnet | None,
    rows: int,
    floor: float = 0.0,
) -> Terms:
    """The terms at every position of `hidden_NH`, `rows` positions at a time (module
    docstring). `dists` and `magnet` take the positions' slice (for their allowed tokens
    and the magnet's own hidden states); `floor` > 0 adds each position's deficit under
    that move floor."""
    n = int(hidden_NH.shape[0])
    chunked = n > rows
    keep = chunked and torch.is_grad_enabled() and hidden_NH.requires_grad
    parts: list[tuple[Tensor, ...]] = []
    for start in range(0, n, rows) if chunked else [0]:
        sl = slice(start, min(n, start + rows))

        def run(h: Tensor, sl: slice = sl) -> tuple[Tensor, ...]:
            return _terms(dists, h, sl, targets_N, magnet, floor)

        if keep:  # the chunk's distributions are recomputed in the backward pass
            parts.append(checkpoint(run, hidden_NH[sl], use_reentrant=False))
        else:
            parts.append(run(hidden_NH[sl]))
    columns = [torch.cat(c) if len(parts) > 1 else c[0] for c in zip(*parts, strict=True)]
    kl = columns[2] if magnet is not None else None
    deficit = columns[-1] if floor > 0 else None
    return Terms(columns[0], columns[1], kl, deficit)
