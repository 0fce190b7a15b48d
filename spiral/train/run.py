"""`spiral train key=value ...`: parse the config, train, print before/after numbers."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path

from spiral.engines.distributed import join_from_env, leave
from spiral.report.console_log import kept_in
from spiral.report.sinks import read_jsonl
from spiral.train.config import ConfigError, help_text, parse_config
from spiral.train.data_parallel import check_config, shared_setup
from spiral.train.loop import train
from spiral.train.setup import build_setup, make_learner_factory

SUMMARY_KEYS = (
    "win_rate",
    "draw_rate",
    "loss_rate",
    "invalid_rate",
    "exploitability_t1",
    "value_vs_nash_seat0_t1",
    "value_vs_nash_seat1_t1",
    "exploitability_rollout_t",
    "value_vs_nash_seat0_rollout_t",
    "value_vs_nash_seat1_rollout_t",
)


def before_after(metrics_path: Path) -> str:
    """First vs last evaluation rows: rates vs each eval opponent for each seat."""
    rows = [r for r in read_jsonl(metrics_path) if any(k.startswith("eval/") for k in r)]
    if not rows:
        return "no evaluation rows (eval_every=0?)"
    first, last = rows[0], rows[-1]
    lines = [f"evaluation at step {first['step']} -> step {last['step']}:"]
    for key in sorted(
        k for k in last if k.startswith("eval/") and k.rsplit("/", 1)[-1] in SUMMARY_KEYS
    ):
        before = first.get(key)
        before_s = f"{before:.3f}" if isinstance(before, (int, float)) else "  -  "
        lines.append(f"  {key[5:]:<52} {before_s} -> {last[key]:.3f}")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if any(a in ("-h", "--help", "help") for a in args):
        print(help_text(args))
        return 0
    try:
        cfg = parse_config(args)
        setup = build_setup(cfg)
    except (ConfigError, KeyError) as err:
        print(f"spiral train: {err}", file=sys.stderr)
        return 2
    ranks = join_from_env()  # torchrun: this process's rank; else one process
    try:
        check_config(cfg, ranks)
    except ConfigError as err:
        if ranks.main:
            print(f"spiral train: {err}", file=sys.stderr)
        return 2
    setup = shared_setup(setup, ranks)
    kept = kept_in(setup.run_dir / "console.log") if ranks.main else contextlib.nullcontext()
    with kept:
        if ranks.main:
            kind = "fully sharded (FSDP)" if cfg.fsdp else "data-parallel"
            world = f", {ranks.world} {kind} ranks" if ranks.world > 1 else ""
            print(
                f"run folder: {setup.run_dir}  ({cfg.num_steps} steps, "
                f"{cfg.games_per_step} games/step{world}; console kept in console.log)"
            )
        result = train(cfg, setup, make_learner_factory(cfg, ranks), ranks=ranks)
        metrics_path = result.run_dir / "metrics.jsonl"
        if ranks.main and metrics_path.exists():
            print(before_after(metrics_path))
    leave(ranks)
    return 130 if result.interrupted else 0
