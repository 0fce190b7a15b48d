"""Sampling one step of games with the LoRA adapter merged into the base weights vs
PEFT's adapter path (`spiral/engines/merged.py`), in one process on the same weights and
games (so the VM's drift cancels out). Arms alternate, `--reps` times; the merged arm
drops its cached merge before each step, as a training step (whose update changes the
adapter) does, so the merge's cost is counted. The adapter is first made non-zero by a
few learner updates on the warm-up games (PEFT starts it at zero).

    python benchmarks/merge_ab.py --preset embedded-kuhn --json out.json [key=value ...]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from spiral.algo.assemble import assemble
from spiral.algo.losses import importance_sampling_loss
from spiral.algo.merge import merge_identical
from spiral.algo.rae import Baselines, rae_advantages
from spiral.engines.merged import _lora_layers, drop_merged, merged_weights
from spiral.engines.snapshots import TRAINED
from spiral.train.config import parse_config
from spiral.train.loop import POLICY, collect
from spiral.train.setup import build_setup, make_learner_factory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="embedded-kuhn")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", default="")
    parser.add_argument("keys", nargs="*", help="more key=value training keys")
    args = parser.parse_args()
    cfg = parse_config([f"preset={args.preset}", "log_path=/dev/null", *args.keys])
    setup = build_setup(cfg)
    learner = make_learner_factory(cfg)()
    learner.temperature = cfg.temperature
    episodes, _ = collect(cfg, setup, learner, 0)
    adv, _, _ = rae_advantages(episodes, Baselines({}), trained_agents={POLICY})
    datums, _ = merge_identical(assemble(episodes, adv)[0])
    for _ in range(3):
        learner.forward_backward(datums, importance_sampling_loss)
        learner.optim_step(cfg.learning_rate_at(0))
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
    print(json.dumps({k: v for k, v in summary.items() if k != "sample_s"}, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
