"""How far to trust a step whose rows were sampled by older weights (the async loop).

`row_age` is a row's staleness: the versions between the weights that sampled it and the
learner's (the per-staleness statistics of `spiral.train.step` group rows by it).

Staleness counts versions, not how far the policy moved in them: early in a run one
update at a high learning rate moves it further (an approx_kl of 2 after the Kuhn
preset's first step) than ten late ones. `kl_lr_scale` measures the distance itself: the
batch's approx_kl between the sampler's log-probs and the learner's (computed in the
forward pass the step needs anyway) and, above a target, shrinks the step in proportion,
a trust region around the weights that played (the adaptive learning rate some PPO codes
use, applied within the step). On fresh rows approx_kl is the sampler/learner numerics
gap (at most 0.016 in the Kuhn sync runs on file), so a target above it leaves the
sync loop alone. `rows_approx_kl` and `step_shrink` are the two pieces of the trust region
that bounds a step on its own rows instead (`spiral.train.trust_region`). Dividing the step by the staleness in versions instead (staleness-aware
async SGD) was measured and did not help (docs/log.md); it is not offered.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from spiral.types import Datum


def row_age(datum: Datum, version: int) -> int:
    """Versions between the weights that sampled `datum` and the learner's `version`;
    0 for a row of unknown version (-1), counted as fresh."""
    return version - datum.policy_version if datum.policy_version >= 0 else 0


def kl_lr_scale(approx_kl: float, target: float) -> float:
    """min(1, target / approx_kl): the factor for a step whose rows' sampler is `approx_kl`
    from the learner's weights; 1.0 when `target` is 0 (off)."""
    if target <= 0 or approx_kl <= target:
        return 1.0
    return target / approx_kl


def rows_approx_kl(
    old: Sequence[Sequence[float]],
    new: Sequence[Sequence[float]],
    masks: Sequence[Sequence[float]],
    weights: Sequence[float],
) -> float:
    """The k3 estimate of KL(old || new) over the masked tokens of rows sampled by `old`:
    the mean of (r - 1) - log r with r = exp(new - old), each row's tokens counted its
    `weight` times (merged rows stand for several); 0.0 when no token is masked."""
    total = count = 0.0
    for row_old, row_new, mask, weight in zip(old, new, masks, weights, strict=True):
        for a, b, m in zip(row_old, row_new, mask, strict=True):
            if m:
                log_ratio = b - a
                total += weight * (math.expm1(log_ratio) - log_ratio)
                count += weight
    return total / count if count else 0.0


def step_shrink(kl: float, kl_max: float) -> float:
    """The factor that brings a step whose KL is `kl` to `kl_max`, taking the KL as
    quadratic in the step (its second-order term around the old weights): sqrt(kl_max /
    kl) above `kl_max`, else 1.0; 1.0 when `kl_max` is 0 (off)."""
    if kl_max <= 0 or kl <= kl_max:
        return 1.0
    return math.sqrt(kl_max / kl)
