"""Where a learner call's time goes (`ab_learner.py`: embedded model, bf16, LoRA r32, the
engine bench's workload, no prefix sharing): three timed calls, then the top operators by
self CPU time of one profiled call. Run from the repository root:

    PYTHONPATH=docs/results/engine-ceilings python docs/results/engine-ceilings/learn_profile.py \
        > docs/results/engine-ceilings/learn-profile.txt
"""

from __future__ import annotations

import torch
from ab_learner import learner_and_datums, timed_call

from spiral.bench.engine import _benchmark_loss


def main() -> None:
    learner, datums = learner_and_datums()
    learner.share_prefix = False
    print("seconds a call:", [round(timed_call(learner, datums)[0], 2) for _ in range(3)])
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        learner.forward_backward(datums, _benchmark_loss)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))


if __name__ == "__main__":
    main()
