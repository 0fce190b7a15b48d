"""Sampling one step of games with the LoRA adapter merged into the base weights vs
PEFT's adapter path (`spiral/engines/torch/merged.py`), in one process on the same weights and
games (so the VM's drift cancels out). Arms alternate, `--reps` times; the merged arm
drops its cached merge before each step, as a training step (whose update changes the
adapter) does, so the merge's cost is counted. The adapter is first made non-zero by a
few learner updates on the warm-up games (PEFT starts it at zero).

    python benchmarks/merge_ab.py --preset embedded-kuhn --json out.json [key=value ...]
"""

from __future__ import annotations

import time
from typing import Any

from ab_setup import ab_args, preset_learner, report

from spiral.engines.torch.merged import _lora_layers, drop_merged, merged_weights
from spiral.engines.torch.snapshots import TRAINED
from spiral.train.loop import collect


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
