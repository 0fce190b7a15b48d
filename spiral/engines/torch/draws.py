"""How the torch samplers turn logits into tokens: the legal-move mask of constrained
answers, the inverse-CDF draw from per-row uniforms (so a row's tokens depend on its own
random stream only), and the stop on NaN or infinite logits. Shared by the tree decode
(`sampler.py`) and the run-ahead decode (`runahead.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from spiral.errors import SpiralError


class NonFiniteLogitsError(SpiralError, FloatingPointError):
    """The model's logits hold NaN or inf: sampling stops instead of drawing garbage."""


def non_finite_error() -> NonFiniteLogitsError:
    return NonFiniteLogitsError(
        "the model produced NaN or infinite logits while sampling: its weights are "
        "broken (a diverged update, e.g. too high a learning_rate, or a damaged "
        "checkpoint); resume from an earlier checkpoint or lower learning_rate"
    )


def mask_to_allowed(scaled_BV: torch.Tensor, states: Sequence[Any]) -> None:
    """Set every token a constrained row may not emit to -inf, in place (one index
    transfer for the whole batch)."""
    rows: list[int] = []
    cols: list[int] = []
    for b, state in enumerate(states):
        allowed = state.allowed() if state is not None else None
        if allowed is not None:
            ids = list(allowed)
            rows.extend([b] * len(ids))
            cols.extend(ids)
    if not rows:
        return
    where = torch.tensor([rows, cols], device=scaled_BV.device)
    constrained_t = where[0].unique()
    keep_BV = torch.full_like(scaled_BV[constrained_t], float("-inf"))
    keep_BV[torch.searchsorted(constrained_t, where[0]), where[1]] = 0.0
    scaled_BV[constrained_t] += keep_BV


def draw_with(logp_BV: torch.Tensor, u_BK: torch.Tensor, top_p: float) -> torch.Tensor:
    """Inverse-CDF draws: row b of `logp_BV` serves the uniforms `u_BK[b]` (a device
    tensor), nucleus-truncated if top_p < 1. Token ids [B, K], nothing read back."""
    probs_BV = logp_BV.exp()
    vocab = probs_BV.shape[-1]
    index_BV = None
    if top_p < 1.0:
        sorted_BV, index_BV = probs_BV.sort(dim=-1, descending=True)
        before_BV = sorted_BV.cumsum(dim=-1) - sorted_BV
        sorted_BV = torch.where(before_BV < top_p, sorted_BV, torch.zeros_like(sorted_BV))
        cdf_BV = sorted_BV.cumsum(dim=-1)
    else:
        cdf_BV = probs_BV.cumsum(dim=-1)
    u_BK = u_BK.to(cdf_BV.dtype)
    pick_BK = torch.searchsorted(cdf_BV, u_BK * cdf_BV[:, -1:], right=True).clamp(max=vocab - 1)
    chosen_BK = index_BV.gather(1, pick_BK) if index_BV is not None else pick_BK
    # Rounding can land on a zero-probability tail token; fall back to the mode then.
    modes_BK = probs_BV.argmax(dim=-1, keepdim=True).expand_as(chosen_BK)
    return torch.where(probs_BV.gather(1, chosen_BK) <= 0, modes_BK, chosen_BK)


def uniforms_tensor(uniforms: Sequence[Sequence[float]], device: Any) -> torch.Tensor:
    """Ragged per-row uniforms as one [B, K] tensor on `device` (short rows padded with 0),
    copied without waiting."""
    width = max(len(us) for us in uniforms)
    padded = [list(us) + [0.0] * (width - len(us)) for us in uniforms]
    return torch.tensor(padded, dtype=torch.float32).to(device, non_blocking=True)


def draw_inverse_cdf(
    logp_BV: torch.Tensor, uniforms: Sequence[Sequence[float]], top_p: float
) -> torch.Tensor:
    """Draw tokens by inverse CDF: row b of `logp_BV` serves every uniform in
    `uniforms[b]` (the rows of one decode node), nucleus-truncated if top_p < 1. Returns
    token ids [B, K] on the logits' device, K the most uniforms of a row (a shorter row's
    extra columns are padding), without waiting for the device."""
    return draw_with(logp_BV, uniforms_tensor(uniforms, logp_BV.device), top_p)


def sample_inverse_cdf(
    logp_BV: torch.Tensor, uniforms: Sequence[Sequence[float]], top_p: float
) -> list[list[int]]:
    """`draw_inverse_cdf` as lists: the tokens drawn for each row's uniforms."""
    chosen_BK = draw_inverse_cdf(logp_BV, uniforms, top_p).tolist()
    return [row[: len(us)] for row, us in zip(chosen_BK, uniforms, strict=True)]


def draw_kept(
    entry: tuple[torch.Tensor, torch.Tensor, int],
    uniforms: list[float],
    temperature: float,
    top_p: float,
) -> tuple[list[int], dict[int, float]]:
    """The tree decode's draw from a frozen member's kept node (`sampler.py`): the raw
    logits of the allowed tokens placed in a -inf vocabulary row, tempered, log-softmaxed,
    one token per uniform by inverse CDF; the tokens and their log-probs."""
    ids, logits, vocab = entry
    scaled_V = torch.full((vocab,), float("-inf"))
    scaled_V[ids] = logits / temperature
    logp_V = torch.log_softmax(scaled_V, dim=-1)
    tokens = sample_inverse_cdf(logp_V.unsqueeze(0), [uniforms], top_p)[0]
    return tokens, {t: float(logp_V[t]) for t in set(tokens)}
