"""Random-play speed of every registered game: a table of games/s (and moves/s).

Usage: `python benchmarks/games.py [--seconds 2] [--json PATH] [GAME_ID ...]`.
A benchmark script, not a test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from spiral.bench.games import games_per_second, play_random
from spiral.games import ids


def mean_moves(game_id: str, games: int = 50, seed: int = 0) -> float:
    rng = random.Random(seed)
    return sum(play_random(game_id, seed + i, rng) for i in range(games)) / games


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time per game id")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument("games", nargs="*", help="game ids (default: all registered)")
    args = parser.parse_args(argv)
    game_ids = args.games or ids()
    rows = []
    print(f"{'game':<26} {'games/s':>10} {'moves/game':>11} {'moves/s':>10}")
    for game_id in game_ids:
        gps = games_per_second(game_id, seconds=args.seconds)
        moves = mean_moves(game_id)
        rows.append({"game_id": game_id, "games_per_s": gps, "mean_moves": moves})
        print(f"{game_id:<26} {gps:>10.0f} {moves:>11.1f} {gps * moves:>10.0f}")
    if args.json is not None:
        record = {"time": time.time(), "python": sys.version.split()[0], "results": rows}
        args.json.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
