"""Where a `make train` step spends its time on this CPU, in one process.

    python docs/results/make-train-cpu-classes/cpu_step_profile.py --json OUT.json [key=value ...]

Builds the preset's learner (`--preset`, default `embedded-kuhn`) with the rows of one
warm-up step, then times, median of `--reps` after an untimed call of each:
- `learn/<arm>_s`: one `forward_backward` over the step's rows with no regulariser
  (`plain`), the entropy bonus (`entropy`), and the entropy plus the KL to a snapshot
  magnet with the magnet's distributions computed every call (`kl`) or kept between calls
  (`kl_kept`, magnet_memo.py);
- `sample/collect_s`: one step of games after an update (a new sampler, the adapter
  merged and packed anew), as in training;
and the learner's positions: per micro-batch the shared prefix, the distinct prompts
(stems) and their padded width, and the top operators of one `kl` call by self CPU time.
Run it under the CPU cap of `make test-capped` to see the commonest CPUs' profile.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

# ab_setup.py, shared with the scripts in benchmarks/, stays there
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from ab_setup import ab_args, preset_learner, report  # noqa: E402

from spiral.algo.losses import importance_sampling_loss  # noqa: E402
from spiral.algo.regularizers import Regularizer  # noqa: E402
from spiral.engines.base import MAGNET  # noqa: E402
from spiral.engines.torch.batching import first_needed, micro_batches  # noqa: E402
from spiral.engines.torch.cpu import describe  # noqa: E402
from spiral.engines.torch.prefill import common_prefix_len  # noqa: E402
from spiral.train.loop import collect  # noqa: E402

ARMS = {
    "plain": Regularizer(),
    "entropy": Regularizer(entropy_coef=0.3),
    "kl": Regularizer(entropy_coef=0.3, kl_coef=0.3, kl_reference="snapshot"),
    "kl_kept": Regularizer(entropy_coef=0.3, kl_coef=0.3, kl_reference="snapshot"),
}


def _positions(learner: Any, datums: list[Any]) -> list[dict[str, int]]:
    out = []
    for chunk in micro_batches(datums, learner.micro_batch_tokens, learner.share_prefix):
        seqs = [datums[i].input_ids for i in chunk]
        ends = [first_needed(datums[i]) for i in chunk]
        prefix = min(common_prefix_len(seqs), *ends) if len(seqs) > 1 else 0
        stems = {tuple(s[:e]) for s, e in zip(seqs, ends, strict=True)}
        width = max(len(s) for s in stems) - prefix
        tail = max(len(s) - e for s, e in zip(seqs, ends, strict=True))
        out.append(
            {"rows": len(chunk), "prefix": prefix, "stems": len(stems), "stem_width": width,
             "computed": prefix + len(stems) * width + len(chunk) * tail}
        )  # fmt: skip
    return out


def _timed(fn: Any, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    args = ab_args(__doc__ or "", "embedded-kuhn", 3)
    cfg, setup, learner, datums = preset_learner(args, updates=1)
    learner.frozen.freeze(MAGNET)
    summary: dict[str, Any] = {
        "cpu": describe(),
        "capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "keys": args.keys,
        "rows": len(datums),
        "row_tokens": sum(len(d.input_ids) for d in datums),
        "micro_batches": _positions(learner, datums),
    }
    for arm, reg in ARMS.items():
        learner.keep_magnet = arm == "kl_kept"

        def step(reg: Regularizer = reg) -> None:
            learner.forward_backward(datums, importance_sampling_loss, reg)
            learner.model.zero_grad(set_to_none=True)

        summary[f"learn/{arm}_s"] = _timed(step, args.reps)
    learner.keep_magnet = False
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        learner.forward_backward(datums, importance_sampling_loss, ARMS["kl"])
    learner.model.zero_grad(set_to_none=True)
    total = sum(e.self_cpu_time_total for e in prof.key_averages())
    summary["learn/top_ops_share"] = {
        e.key: round(e.self_cpu_time_total / total, 4)
        for e in sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:12]
    }
    learner.keep_magnet = True
    times = []
    for step in range(1, args.reps + 2):  # each after an update, as in training
        learner.forward_backward(datums, importance_sampling_loss)
        learner.optim_step(1e-6)
        start = time.perf_counter()
        collect(cfg, setup, learner, step)
        times.append(time.perf_counter() - start)
    summary["sample/collect_s"] = statistics.median(times[1:])
    report(summary, args.json, hide="")


if __name__ == "__main__":
    main()
