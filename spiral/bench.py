"""`spiral bench`: throughput numbers measured on this machine, in one run.

    spiral bench what=games            random-play games/s for every registered game
    spiral bench what=engine model=embedded batch=16 prompt_tokens=256 new_tokens=32
    spiral bench what=selfplay model=embedded hands=512   Kuhn hands/s, by what is shared
    spiral bench what=all out=bench.json                  games + engine

Numbers are reported as measured (and as ratios where two are compared, e.g. prefix reuse
vs plain `generate`), never asserted in tests.
"""

from __future__ import annotations

import json
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

USAGE = (
    "usage: spiral bench [what=games|engine|selfplay|all] [model=embedded] [batch=16] "
    "[prompt_tokens=256] [new_tokens=32] [hands=512] [seconds=2] [out=FILE.json]"
)


def bench_games(seconds: float) -> dict[str, float]:
    from spiral import games
    from spiral.games.speed import games_per_second

    return {f"games_per_s/{g}": games_per_second(g, seconds=seconds) for g in games.ids()}


def bench_engine(args: dict[str, str]) -> dict[str, float]:
    from spiral.engines.benchmark import run_engine_benchmark

    return run_engine_benchmark(
        model=args.get("model", "embedded"),
        batch=int(args.get("batch", "16")),
        prompt_tokens=int(args.get("prompt_tokens", "256")),
        new_tokens=int(args.get("new_tokens", "32")),
    )


def bench_selfplay(args: dict[str, str]) -> dict[str, float]:
    from spiral.train.benchmark import run_selfplay_benchmark

    return run_selfplay_benchmark(
        model=args.get("model", "embedded"), hands=int(args.get("hands", "512"))
    )


def machine() -> dict[str, Any]:
    import os

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        info["torch"] = None
    return info


def _fmt(value: Any) -> str:
    if not isinstance(value, float):
        return str(value)
    return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}"


def main(argv: Sequence[str]) -> int:
    if any(a in ("-h", "--help") for a in argv) or any("=" not in a for a in argv):
        print(USAGE)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    args = dict(a.split("=", 1) for a in argv)
    what = args.get("what", "all")
    if what not in ("games", "engine", "selfplay", "all"):
        print(
            f"spiral bench: what={what!r} is not one of games, engine, selfplay, all",
            file=sys.stderr,
        )
        return 2
    results: dict[str, Any] = {"machine": machine()}
    if what in ("games", "all"):
        results.update(bench_games(float(args.get("seconds", "2"))))
    if what in ("engine", "all"):
        results.update(bench_engine(args))
    if what == "selfplay":
        results.update(bench_selfplay(args))
    width = max(len(k) for k in results)
    for key, value in results.items():
        shown = _fmt(value)
        print(f"{key:<{width}}  {shown}")
    if "out" in args:
        Path(args["out"]).write_text(json.dumps(results, indent=2), encoding="utf-8")
        print(f"wrote {args['out']}")
    return 0
