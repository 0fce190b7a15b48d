"""One training step's two halves, before and after the attention and LoRA-precision
changes, in one process on the same weights and games (so the VM's drift cancels out):

- before: transformers' `sdpa` attention and PEFT's fp32 LoRA path (the engine before
  these changes);
- after: the `spiral` attention (matmuls on CPUs in bf16, `spiral/engines/torch/attention.py`)
  and the LoRA products in bf16 (`spiral/engines/torch/precision.py`).

Each arm samples one step of games (the preset's batch, same seeds) and runs the
learner's forward + backward on one fixed set of rows; arms alternate, `--reps` times.
Usage:

    python docs/results/engine-matmul-attention/step_ab.py --preset embedded-kuhn \
        --json out.json [key=value ...]
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# ab_setup.py, shared with the scripts in benchmarks/, stays there
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from ab_setup import ab_args, preset_learner, report  # noqa: E402

import spiral.engines.torch.learner as learner_module  # noqa: E402
import spiral.engines.torch.sampler as sampler_module  # noqa: E402
from spiral.algo.losses import importance_sampling_loss  # noqa: E402
from spiral.engines.torch.attention import NAME  # noqa: E402
from spiral.engines.torch.learner import Regularizer  # noqa: E402
from spiral.engines.torch.precision import model_compute  # noqa: E402
from spiral.train.loop import collect  # noqa: E402


@contextlib.contextmanager
def _no_lora_compute(model: Any) -> Iterator[None]:
    yield


def _arm(learner: Any, after: bool) -> None:
    """Switch every model call in this process to one arm: the attention by name on the
    model, the LoRA precision by rebinding the name the learner and sampler modules call
    (a benchmark-only swap of module globals; the product has no switch for it)."""
    learner.model.set_attn_implementation(NAME if after else "sdpa")
    ctx = model_compute if after else _no_lora_compute
    learner_module.model_compute = ctx  # type: ignore[attr-defined]
    sampler_module.model_compute = ctx  # type: ignore[attr-defined]


def main() -> None:
    args = ab_args(__doc__ or "", "embedded-kuhn", 2)
    cfg, setup, learner, datums = preset_learner(args)  # the rows both arms learn on
    reg = Regularizer(cfg.at(cfg.regularizer.entropy_coef, 0), 0.0, "uniform")
    rows: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for rep in range(args.reps + 1):  # rep 0 warms each arm up and is not kept
        for arm in ("before", "after"):
            _arm(learner, arm == "after")
            start = time.perf_counter()
            collect(cfg, setup, learner, 1)
            sample_s = time.perf_counter() - start
            start = time.perf_counter()
            learner.forward_backward(datums, importance_sampling_loss, reg)
            learn_s = time.perf_counter() - start
            learner.model.zero_grad(set_to_none=True)
            if rep > 0:
                rows[arm].append({"sample_s": sample_s, "learn_s": learn_s})
            print(f"rep {rep} {arm}: sample {sample_s:.2f} s, learn {learn_s:.2f} s", flush=True)
    summary: dict[str, Any] = {
        "preset": args.preset,
        "keys": args.keys,
        "rows": len(datums),
        "tokens": sum(len(d.input_ids) for d in datums),
        "runs": rows,
    }
    for key in ("sample_s", "learn_s"):
        before = min(r[key] for r in rows["before"])
        after = min(r[key] for r in rows["after"])
        summary[f"{key}_before"], summary[f"{key}_after"] = before, after
        summary[f"{key}_speedup"] = before / after
    report(summary, args.json, hide="runs")


if __name__ == "__main__":
    main()
