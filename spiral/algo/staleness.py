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
sync loop alone. Dividing the step by the staleness in versions instead (staleness-aware
async SGD) was measured and did not help (docs/log.md); it is not offered.
"""

from __future__ import annotations

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
