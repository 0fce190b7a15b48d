"""Sampling one step of games with the LoRA adapter merged into the base weights vs
PEFT's adapter path (`spiral/engines/torch/merged.py`), in one process on the same weights and
games (so the VM's drift cancels out). Arms alternate, `--reps` times; the merged arm
drops its cached merge before each step, as a training step (whose update changes the
adapter) does, so the merge's cost is counted. The adapter is first made non-zero by a
few learner updates on the warm-up games (PEFT starts it at zero).

    python docs/results/merged-lora/merge_ab.py --preset embedded-kuhn --json out.json \
        [key=value ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

# ab_setup.py, shared with the scripts in benchmarks/, stays there
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from ab_setup import ab_args, preset_learner, report  # noqa: E402

from spiral.engines.torch.merged import _lora_layers, drop_merged, merged_weights  # noqa: E402
from spiral.engines.torch.snapshots import TRAINED  # noqa: E402
from spiral.train.loop import collect  # noqa: E402


def main() -> None:
    args = ab_args(__doc__ or "", "embedded-kuhn", 3)
    cfg, setup, learner, _ = preset_learner(args, updates=3)
    layers = _lora_layers(learner.model, TRAINED)
    start = time.perf_counter()
    merged_weights(learner.model, TRAINED, layers or [])
    merge_s = time.perf_counter() - start
    rows: dict[str, list[float]] = {"adapter": [], "merged": []}
    for rep in range(args.reps + 1):  # rep 0 warms each arm up and is not kept
        for arm in ("adapter", "merged"):
            learner.merge_lora = arm == "merged"
            drop_merged(learner.model)
            start = time.perf_counter()
            collect(cfg, setup, learner, 1 + rep)
            seconds = time.perf_counter() - start
            if rep > 0:
                rows[arm].append(seconds)
            print(f"rep {rep} {arm}: sample {seconds:.2f} s", flush=True)
    summary: dict[str, Any] = {
        "preset": args.preset,
        "keys": args.keys,
        "adapted_layers": len(layers or []),
        "merge_s": merge_s,
        "sample_s": rows,
        "sample_s_adapter": min(rows["adapter"]),
        "sample_s_merged": min(rows["merged"]),
    }
    summary["speedup"] = summary["sample_s_adapter"] / summary["sample_s_merged"]
    report(summary, args.json, hide="sample_s")


if __name__ == "__main__":
    main()
