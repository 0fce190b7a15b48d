"""How much of `make train`'s learner step is the regulariser's reference forward: the
`embedded-kuhn` preset's rows of one warm-up step (`benchmarks/ab_setup.py`), its update at
step 60 (KL coefficient 0.30 on the ramp to 0.6, entropy bonus on) three times from the
same weights, timing `TorchLearner._reference_dists` (the no-gradient forward of the KL
reference over the same rows) inside it. Run from the repository root:

    python docs/results/engine-ceilings/kuhn_reference_time.py > docs/results/engine-ceilings/kuhn-reference-time.txt
"""

from __future__ import annotations

import sys
import time
from typing import Any

sys.path.insert(0, "benchmarks")

from ab_setup import ab_args, preset_learner  # noqa: E402

from spiral.engines.torch.learner import TorchLearner  # noqa: E402
from spiral.train.step import update  # noqa: E402

STEP = 60


def main() -> None:
    args = ab_args(__doc__ or "", "embedded-kuhn", 3)
    cfg, _, learner, datums = preset_learner(args)
    tokens = sum(len(d.input_ids) for d in datums)
    print(f"rows {len(datums)}, tokens {tokens}, kl_coef {cfg.kl_coef_at(STEP):.3f}")
    spent: list[float] = []
    reference = TorchLearner._reference_dists

    def timed(self: TorchLearner, batch: Any, fwd: Any) -> Any:
        start = time.perf_counter()
        out = reference(self, batch, fwd)
        spent.append(time.perf_counter() - start)
        return out

    TorchLearner._reference_dists = timed  # type: ignore[method-assign]
    state = {k: v.clone() for k, v in learner.trained_state().items()}
    for _ in range(args.reps):
        spent.clear()
        start = time.perf_counter()
        update(cfg, learner, datums, STEP)
        total = time.perf_counter() - start
        print(f"update {total:.2f} s, of which the reference forward {sum(spent):.2f} s "
              f"({len(spent)} micro-batches)")  # fmt: skip
        learner.load_trained_state(state, learner.version)


if __name__ == "__main__":
    main()
