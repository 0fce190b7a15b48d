"""A trust region around the weights that played a step's rows (`step_kl_max`).

Adam moves every trained weight by about the learning rate whatever the gradient's size,
so one update can move the policy far: the Kuhn preset's first step at lr 1e-3 takes it
to an approx_kl of ~2 from the weights that played, and its entropy from 0.53 to ~0.15.
`bound_step` measures each update where it matters, on the rows it was computed from:
after the optimizer step, the k3 approx_kl between the sampler's log-probs and the
updated weights' on those rows' trained tokens (one forward pass without gradients).
Above `kl_max` the step is shrunk towards the weights before it by `step_shrink` (the
same step taken at a smaller learning rate; Adam's moments do not depend on the rate),
so no update moves the policy much more than `kl_max` on its own data. The async loop's
`lr_kl_target` scales a step by how far the weights moved *before* it; this bounds the
step itself, in either loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spiral.algo.staleness import rows_approx_kl, step_shrink
from spiral.engines.base import Learner
from spiral.types import Datum


def shrunk(before: Mapping[str, Any], after: Mapping[str, Any], scale: float) -> dict[str, Any]:
    """before + scale * (after - before), weight by weight."""
    return {name: before[name] + scale * (after[name] - before[name]) for name in after}


def bound_step(
    learner: Learner, datums: Sequence[Datum], before: Mapping[str, Any], kl_max: float
) -> dict[str, float]:
    """Shrink the update the learner just took (from `before`, its `trained_state()` then)
    so that its KL on `datums` is about `kl_max`; returns `step_kl` (measured before any
    shrink) and `step_kl_scale` (1.0: the step was kept whole)."""
    logprobs = learner.logprobs(datums, trained_only=True)  # type: ignore[attr-defined]
    kl = rows_approx_kl(
        [d.sampler_logprobs for d in datums],
        logprobs,
        [d.mask for d in datums],
        [d.weight for d in datums],
    )
    scale = step_shrink(kl, kl_max)
    if scale < 1.0:
        learner.load_trained_state(shrunk(before, learner.trained_state(), scale), learner.version)
    return {"step_kl": kl, "step_kl_scale": scale}
