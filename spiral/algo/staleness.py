"""How far to trust a step whose rows were sampled by older weights (the async loop).

A delayed gradient is a gradient of where the policy was, applied where it is: with a
large step the delay makes the update overshoot and oscillate (delayed gradient descent
is stable only for step sizes that shrink as the delay grows). Staleness-aware
asynchronous SGD (Zhang, Gupta, Lian and Liu, IJCAI 2016) divides each gradient's step
size by its staleness. One optimizer step here combines rows of several stalenesses, so

    scale = sum_rows tokens * 1 / max(1, age)  /  sum_rows tokens

with `age` = versions between the weights that sampled the row and the learner's, and
`tokens` = the row's trained tokens (its mask's sum) times its `weight` (the rows it
stands for). A step on fresh rows (age 0, the sync loop) or one version behind (age 1,
the least the async loop can have once it overlaps) keeps the full learning rate; two
versions behind, half.
With plain SGD this equals giving every row its own step size lr / max(1, age); with Adam,
which normalises the gradient's scale away, it is applied to the learning rate.

The staleness counts versions, not how far the policy moved in them: early in a run one
update at a high learning rate moves it further (an approx_kl of 2 after the Kuhn
preset's first step) than ten late ones. `kl_lr_scale` measures the distance itself: the
batch's approx_kl between the sampler's log-probs and the learner's (computed in the
forward pass the step needs anyway) and, above a target, shrinks the step in proportion,
a trust region around the weights that played (the adaptive learning rate some PPO codes
use, applied within the step). On fresh rows approx_kl is the sampler/learner numerics
gap (at most 0.016 in the Kuhn sync runs on file), so a target above it leaves the
sync loop alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from spiral.types import Datum


def row_age(datum: Datum, version: int) -> int:
    """Versions between the weights that sampled `datum` and the learner's `version`;
    0 for a row of unknown version (-1), counted as fresh."""
    return version - datum.policy_version if datum.policy_version >= 0 else 0


def staleness_lr_scale(datums: Sequence[Datum], version: int) -> float:
    """The factor for the learning rate of a step on `datums` at learner `version`: the
    trained-token-weighted mean of 1 / max(1, age). Rows of unknown version (-1) count as
    fresh; 1.0 when no row has a trained token."""
    total = scaled = 0.0
    for d in datums:
        tokens = d.weight * sum(d.mask)
        total += tokens
        scaled += tokens / max(1, row_age(d, version))
    return scaled / total if total > 0 else 1.0


def kl_lr_scale(approx_kl: float, target: float) -> float:
    """min(1, target / approx_kl): the factor for a step whose rows' sampler is `approx_kl`
    from the learner's weights; 1.0 when `target` is 0 (off)."""
    if target <= 0 or approx_kl <= target:
        return 1.0
    return target / approx_kl
