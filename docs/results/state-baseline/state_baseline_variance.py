"""How much advantage variance a baseline per identical state removes, on a preset's
own self-play games.

    python docs/results/state-baseline/state_baseline_variance.py [--preset embedded-kuhn]
        [--reps 3] [--json OUT] [checkpoint=RUN/checkpoints/step_000120] [key=value ...]

Plays `reps` steps of the preset's games with its policy (untrained, or the trained
weights of `checkpoint=`, a run's checkpoint folder) and compares, over
every trained turn, the advantages of one baseline per (game, seat) (the batch's mean
return: the best such constant, where RAE's moving average aims) with the leave-one-out
baseline of identical full states (`spiral/algo/state_baseline.py`, falling back to the
per-seat one). Reports the variance of each, their ratio, and how many turns had another
turn of their state in the batch.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

# ab_setup.py, shared with the scripts in benchmarks/, stays there
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from ab_setup import ab_args, report  # noqa: E402

from spiral.algo.state_baseline import leave_one_out_advantages  # noqa: E402
from spiral.rollout.state_keys import turn_state_keys  # noqa: E402
from spiral.train.config import parse_config  # noqa: E402
from spiral.train.loop import POLICY, collect  # noqa: E402
from spiral.train.setup import build_setup, make_learner_factory  # noqa: E402


def main() -> None:
    args = ab_args(__doc__ or "", "embedded-kuhn", 3)
    checkpoint = next((k.partition("=")[2] for k in args.keys if k.startswith("checkpoint=")), "")
    keys = [k for k in args.keys if not k.startswith("checkpoint=")]
    cfg = parse_config([f"preset={args.preset}", "log_path=/dev/null", *keys])
    setup = build_setup(cfg)
    learner = make_learner_factory(cfg)()
    if checkpoint:
        learner.load(Path(checkpoint) / "learner")
    learner.temperature = cfg.temperature
    per_step = []
    for step in range(args.reps):
        episodes, _ = collect(cfg, setup, learner, step)
        keys, returns, seat_of = [], [], []
        for ep in episodes:
            for turn, key in zip(ep.turns, turn_state_keys(ep), strict=True):
                if turn.trainable and ep.agents[turn.seat] == POLICY:
                    keys.append(key)
                    returns.append(ep.returns[turn.seat])
                    seat_of.append((ep.game_id, turn.seat))
        by_seat: dict[tuple[str, int], list[float]] = defaultdict(list)
        for seat, value in zip(seat_of, returns, strict=True):
            by_seat[seat].append(value)
        fallback = [statistics.fmean(by_seat[s]) for s in seat_of]
        seat_adv = [r - b for r, b in zip(returns, fallback, strict=True)]
        state_adv = leave_one_out_advantages(keys, returns, fallback)
        counts: dict[object, int] = defaultdict(int)
        for key in keys:
            counts[key] += 1
        per_step.append(
            {
                "turns": len(keys),
                "states": len(counts),
                "share_of_turns_with_a_twin": sum(counts[k] > 1 for k in keys) / len(keys),
                "variance_seat_baseline": statistics.pvariance(seat_adv),
                "variance_state_baseline": statistics.pvariance(state_adv),
            }
        )
        per_step[-1]["ratio"] = (
            per_step[-1]["variance_state_baseline"] / per_step[-1]["variance_seat_baseline"]
        )
    summary = {
        "preset": args.preset,
        "checkpoint": checkpoint or "untrained",
        "steps": per_step,
        "ratio_mean": statistics.fmean(s["ratio"] for s in per_step),
    }
    report(summary, args.json, hide="")


if __name__ == "__main__":
    main()
