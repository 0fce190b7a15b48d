"""What the one-process A/B scripts share: their arguments, a preset's learner with the
rows of one warm-up step, and the summary they print and write. Nothing here runs on its
own.

Imported by `pool_decode.py` beside it and by the A/B scripts kept with their results
under docs/results/ (`engine-matmul-attention/step_ab.py`, `merged-lora/merge_ab.py`,
`engine-decode-step/decode_ab.py` and `tokenize_once_ab.py`,
`make-train-cpu-classes/cpu_step_profile.py`, `state-baseline/state_baseline_variance.py`,
`engine-ceilings/kuhn_reference_time.py`), which put this folder on their import path."""

from __future__ import annotations

import argparse
import json
from typing import Any

from spiral.algo.assemble import assemble
from spiral.algo.losses import importance_sampling_loss
from spiral.algo.merge import merge_identical
from spiral.algo.rae import Baselines, rae_advantages
from spiral.train.config import parse_config
from spiral.train.loop import POLICY, collect
from spiral.train.setup import build_setup, make_learner_factory


def ab_args(doc: str, preset: str, reps: int) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--preset", default=preset)
    parser.add_argument("--reps", type=int, default=reps)
    parser.add_argument("--json", default="")
    parser.add_argument("keys", nargs="*", help="more key=value training keys")
    return parser.parse_args()


def preset_learner(args: argparse.Namespace, updates: int = 0) -> tuple[Any, Any, Any, list[Any]]:
    """(config, setup, learner, rows) for `args.preset`: the rows are one warm-up step's
    games; `updates` learner steps on them first make a LoRA adapter non-zero (PEFT
    starts it at zero)."""
    cfg = parse_config([f"preset={args.preset}", "log_path=/dev/null", *args.keys])
    setup = build_setup(cfg)
    learner = make_learner_factory(cfg)()
    learner.temperature = cfg.temperature
    episodes, _ = collect(cfg, setup, learner, 0)
    adv, _, _ = rae_advantages(episodes, Baselines({}), trained_agents={POLICY})
    datums, _ = merge_identical(assemble(episodes, adv)[0])
    for _ in range(updates):
        learner.forward_backward(datums, importance_sampling_loss)
        learner.optim_step(cfg.at(cfg.learning_rate, 0))
    return cfg, setup, learner, datums


def report(summary: dict[str, Any], path: str, hide: str) -> None:
    """Print `summary` without its bulky `hide` key; write it whole to `path` if set."""
    print(json.dumps({k: v for k, v in summary.items() if k != hide}, indent=1))
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=1)
            f.write("\n")
