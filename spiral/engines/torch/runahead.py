"""Free-text decode that runs ahead of the host: the sampler's path for sampled free text
over CUDA graphs (`graphs.StaticDecoder`).

The tree decode (`sampler.py`) reads every step's tokens back to the host, to group rows
that drew the same token and to apply each row's stop rules. That read makes the host
wait for the device once per token, which a replayed CUDA graph step (a few milliseconds)
cannot afford. Sampled free text gains little from the tree anyway (rows branch within a
few tokens), so here every row gets its own cache row from the start and the device runs
`RUN_AHEAD` steps at a time with nothing read back:

- each row's uniforms for those steps are drawn from its own random stream up front (the
  numbers the tree decode would draw, one per step while the row lives) and sent in one
  copy; the draw (`draws.draw_with`) and the log-prob happen on the device;
- the finiteness of the logits is folded into one device flag;
- after the block, one read brings back its tokens and log-probs, and the host applies
  the same stop rules as the tree decode (`advance`) token by token: a row that ended
  inside the block keeps the tokens up to its stop, and the ones decoded after are
  dropped. Rows that ended leave the batch when the padded size the graphs use shrinks
  (`graphs.padded_size`); until then they stay in their slots, computed and unread.

So the completions are the tree decode's, token for token, up to floating-point
differences between batch shapes (tested on CPU through the same static buffers), and a
row runs at most `RUN_AHEAD - 1` steps past its end. Constrained answers (a few tokens
over a few legal moves, where the tree shares nearly everything) and greedy decoding
(identical rows never branch) stay on the tree decode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from spiral.engines.base import SamplingCancelled, SamplingParams
from spiral.engines.torch.decode import Decoder
from spiral.engines.torch.draws import draw_with, non_finite_error
from spiral.engines.torch.graphs import padded_size

RUN_AHEAD = 16  # decode steps between host reads


def runs_ahead(constraints: Sequence[Any], params: SamplingParams) -> bool:
    """Whether a chunk of rows with these constraints decodes here, not as a tree."""
    return params.temperature > 0 and params.max_tokens > 0 and all(c is None for c in constraints)


def run_ahead(
    decoder: Decoder,
    logits_GV: torch.Tensor,
    rows_G: Sequence[Sequence[Any]],
    params: SamplingParams,
    advance: Callable[[Any, int, SamplingParams], None],
    every: int | None = None,
) -> int:
    """Decode every row of `rows_G` (the rows of each prefilled group, whose next-token
    logits are `logits_GV` and whose caches are `decoder`'s rows) to its end. Rows are the
    sampler's: `rng`, `tokens`, `logprobs`, `stop_reason`, updated by `advance`. Returns
    the tokens the rows kept (the steps ended rows ran in their slots are not counted).
    `every`: steps between host reads (default `RUN_AHEAD`)."""
    every = every or RUN_AHEAD
    device = logits_GV.device
    owner = [g for g, rows in enumerate(rows_G) for _ in rows]
    slots: list[Any] = [row for rows in rows_G for row in rows]  # None: ended, not yet dropped
    index = torch.tensor(owner, device=device)
    decoder.select(index)
    logits_RV = logits_GV.index_select(0, index)
    feed: torch.Tensor | None = None  # the last drawn tokens, fed at the next step
    length = 0
    while slots:
        if params.cancel is not None and params.cancel.is_set():
            raise SamplingCancelled("sampling was cancelled (SamplingParams.cancel)")
        steps = min(every, params.max_tokens - length)
        u_RK = torch.tensor(
            [[row.rng.random() for _ in range(steps)] if row else [0.0] * steps for row in slots]
        ).to(device, non_blocking=True)
        tokens_RK, logps_RK, feed, bad = _block(decoder, logits_RV, feed, u_RK, params)
        length += steps
        block_tokens, block_logps = tokens_RK.tolist(), logps_RK.tolist()  # the block's read
        if bad.item():
            raise non_finite_error()
        for r, row in enumerate(slots):
            if row is not None:
                _take(row, block_tokens[r], block_logps[r], params, advance)
                if row.stop_reason is not None:
                    slots[r] = None
        live = [r for r, row in enumerate(slots) if row is not None]
        if not live:
            break
        if padded_size(len(live)) < padded_size(len(slots)):
            keep = torch.tensor(live, device=device)
            decoder.select(keep)
            feed = feed.index_select(0, keep)
            slots = [slots[r] for r in live]
    return sum(len(row.tokens) for rows in rows_G for row in rows)


def _block(
    decoder: Decoder,
    logits_RV: torch.Tensor,
    feed: torch.Tensor | None,
    u_RK: torch.Tensor,
    params: SamplingParams,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`K` steps on the device, nothing read back: feed the last tokens (none at the
    first block, whose first logits are `logits_RV`), draw with the uniforms `u_RK`.
    Returns the tokens and log-probs [R, K], the tokens to feed next, and a flag set if
    any logits were not finite."""
    tokens, logps = [], []
    bad = torch.zeros((), dtype=torch.bool, device=u_RK.device)
    for k in range(u_RK.shape[1]):
        if feed is not None:
            logits_RV = decoder.step(feed)
        scaled_RV = logits_RV.float() / params.temperature
        bad |= ~torch.isfinite(scaled_RV).all()
        logp_RV = torch.log_softmax(scaled_RV, dim=-1)
        token_R1 = draw_with(logp_RV, u_RK[:, k : k + 1], params.top_p)
        tokens.append(token_R1)
        logps.append(logp_RV.gather(1, token_R1))
        feed = token_R1[:, 0]
    assert feed is not None
    return torch.cat(tokens, dim=1), torch.cat(logps, dim=1), feed, bad


def _take(
    row: Any,
    tokens: list[int],
    logps: list[float],
    params: SamplingParams,
    advance: Callable[[Any, int, SamplingParams], None],
) -> None:
    """Append a block's tokens to `row` up to its stop (the tree decode's rules)."""
    for token, logp in zip(tokens, logps, strict=True):
        row.tokens.append(token)
        row.logprobs.append(logp)
        advance(row, token, params)
        if row.stop_reason is not None:
            return
