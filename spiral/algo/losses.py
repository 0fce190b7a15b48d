"""Policy-gradient losses over token log-probs: a small registry of pure functions.

Every loss has the same shape (see `spiral.engines.base.LossFn`):

    loss_fn(new_logp_T, sampler_logp_T, advantages_T, mask_T, clip=0.2) -> (loss, diagnostics)

where the tensors share one shape (usually the target tokens of one datum, or a padded
batch), `new_logp_T` carries gradients and the others do not. Choices made here:

- **The loss is a SUM over masked tokens**, as Tinker's `forward_backward` does. The
  learner decides how to normalise (per batch, per token, or a constant as in Dr. GRPO),
  so the same function serves every engine.
- **importance_sampling** is unclipped, -sum(r * A): Tinker's default. Off-policy data is
  re-weighted by r = p_new / p_sampler but not bounded.
- **ppo** is the clipped surrogate, -sum(min(r * A, clip(r, 1 - eps, 1 + eps) * A)).
- The log-ratio is set to 0 on masked positions before exponentiating, so a huge
  difference on a prompt position can neither overflow nor leak NaN into the gradient.
- **Diagnostics** (plain floats, over masked tokens, weighted by the mask): ratio_mean /
  ratio_min / ratio_max; clip_frac, the fraction of tokens where PPO's clipped branch is
  the active one (the min picks it strictly, so that token gets no gradient), reported for
  both losses because it measures how off-policy the data is; approx_kl, the k3 estimator
  mean((r - 1) - log r) (CleanRL's); kl_sample_train_v1 = mean(old - new) and
  kl_sample_train_v2 = 0.5 * mean((old - new)^2) (Tinker's names); num_tokens, so the
  caller can weight diagnostics across micro-batches. An empty mask gives a zero loss
  (still attached to the graph) and neutral diagnostics (ratios 1, KLs 0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from spiral.algo.names import LOSS_NAMES

# The same shape as spiral.engines.base.LossFn, spelled out here because algo sits below
# engines and may not import it.
LossFn = Callable[..., tuple[Tensor, dict[str, float]]]


def _check(
    new_logp_T: Tensor, sampler_logp_T: Tensor, advantages_T: Tensor, mask_T: Tensor
) -> None:
    shapes = {t.shape for t in (new_logp_T, sampler_logp_T, advantages_T, mask_T)}
    if len(shapes) != 1:
        raise ValueError(
            "loss inputs must share one shape (new_logp, sampler_logp, advantages, mask); got "
            f"{tuple(new_logp_T.shape)}, {tuple(sampler_logp_T.shape)}, "
            f"{tuple(advantages_T.shape)}, {tuple(mask_T.shape)}"
        )


def _log_ratio(new_logp_T: Tensor, sampler_logp_T: Tensor, mask_T: Tensor) -> Tensor:
    # where() instead of multiplying by the mask: masked positions must not produce inf/NaN.
    return torch.where(
        mask_T > 0, new_logp_T - sampler_logp_T.detach(), torch.zeros_like(new_logp_T)
    )


@torch.no_grad()
def _diagnostics(
    log_ratio_T: Tensor, advantages_T: Tensor, mask_T: Tensor, clip: float
) -> dict[str, float]:
    selected = mask_T > 0
    weights = mask_T[selected].double()
    total = float(weights.sum())
    if total == 0.0:
        return {
            "ratio_mean": 1.0,
            "ratio_min": 1.0,
            "ratio_max": 1.0,
            "clip_frac": 0.0,
            "approx_kl": 0.0,
            "kl_sample_train_v1": 0.0,
            "kl_sample_train_v2": 0.0,
            "num_tokens": 0.0,
        }
    log_ratio = log_ratio_T[selected].double()
    adv = advantages_T[selected].double()
    ratio = log_ratio.exp()
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - clip, 1.0 + clip) * adv
    clipped_active = (clipped < unclipped).double()

    def mean(values: Tensor) -> float:
        return float((values * weights).sum() / total)

    return {
        "ratio_mean": mean(ratio),
        "ratio_min": float(ratio.min()),
        "ratio_max": float(ratio.max()),
        "clip_frac": mean(clipped_active),
        "approx_kl": mean((ratio - 1.0) - log_ratio),
        # old - new = -log_ratio
        "kl_sample_train_v1": mean(-log_ratio),
        "kl_sample_train_v2": mean(0.5 * log_ratio**2),
        "num_tokens": float(selected.sum()),
    }


def importance_sampling_loss(
    new_logp_T: Tensor,
    sampler_logp_T: Tensor,
    advantages_T: Tensor,
    mask_T: Tensor,
    clip: float = 0.2,
) -> tuple[Tensor, dict[str, float]]:
    """-sum(exp(new - old) * A * mask); `clip` only feeds the clip_frac diagnostic."""
    _check(new_logp_T, sampler_logp_T, advantages_T, mask_T)
    log_ratio_T = _log_ratio(new_logp_T, sampler_logp_T, mask_T)
    loss = -(log_ratio_T.exp() * advantages_T.detach() * mask_T).sum()
    return loss, _diagnostics(log_ratio_T, advantages_T, mask_T, clip)


def ppo_loss(
    new_logp_T: Tensor,
    sampler_logp_T: Tensor,
    advantages_T: Tensor,
    mask_T: Tensor,
    clip: float = 0.2,
) -> tuple[Tensor, dict[str, float]]:
    """-sum(min(r * A, clip(r, 1 - eps, 1 + eps) * A) * mask) with eps = `clip`."""
    if not 0.0 < clip < 1.0:
        raise ValueError(f"PPO clip must satisfy 0 < clip < 1 (0.2 is usual), got {clip}")
    _check(new_logp_T, sampler_logp_T, advantages_T, mask_T)
    log_ratio_T = _log_ratio(new_logp_T, sampler_logp_T, mask_T)
    ratio_T = log_ratio_T.exp()
    adv_T = advantages_T.detach()
    surrogate_T = torch.minimum(ratio_T * adv_T, ratio_T.clamp(1.0 - clip, 1.0 + clip) * adv_T)
    loss = -(surrogate_T * mask_T).sum()
    return loss, _diagnostics(log_ratio_T, advantages_T, mask_T, clip)


LOSSES: dict[str, LossFn] = {
    "importance_sampling": importance_sampling_loss,
    "ppo": ppo_loss,
}
assert tuple(LOSSES) == LOSS_NAMES, "spiral.algo.names.LossName must list every loss"


def get_loss(name: str) -> LossFn:
    """The loss registered under `name`."""
    try:
        return LOSSES[name]
    except KeyError:
        raise KeyError(f"unknown loss {name!r}; choose one of {sorted(LOSSES)}") from None


def loss_name(loss_fn: LossFn) -> str | None:
    """The registered name of `loss_fn` (a loss, or a functools.partial of one), or None:
    engines that compute the loss remotely (Tinker) send the name, not the function."""
    fn = getattr(loss_fn, "func", loss_fn)
    return next((name for name, f in LOSSES.items() if f is fn), None)


_SUMMED = ("loss", "num_tokens")
_EXTREMES = {"ratio_min": min, "ratio_max": max}


def combine_diagnostics(parts: Sequence[dict[str, float]]) -> dict[str, float]:
    """The diagnostics of one gradient computed in several calls (per staleness, per
    rank) as if it were one: `loss` and `num_tokens` summed, `ratio_min` / `ratio_max`
    the extremes, every other key the mean weighted by each part's `num_tokens`."""
    tokens = [p.get("num_tokens", 0.0) for p in parts]
    total = sum(tokens)
    out: dict[str, float] = {}
    for key in sorted({k for p in parts for k in p}):
        values = [(p[key], t) for p, t in zip(parts, tokens, strict=True) if key in p]
        if key in _SUMMED:
            out[key] = sum(v for v, _ in values)
        elif key in _EXTREMES:
            out[key] = _EXTREMES[key](v for v, _ in values)
        else:
            out[key] = sum(v * t for v, t in values) / total if total > 0 else 0.0
    return out
