"""The evaluation table of docs/results.md's TicTacToe comparison, from the kept metrics:
W/D/L per opponent and seat with 95% Wilson intervals at each evaluation, and the
self-play outcome split per 25 steps. `python table.py`."""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
G = "TicTacToe-v0"


def rows_of(path: Path) -> list[dict]:
    latest: dict[tuple[int, bool], dict] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            latest[(r["step"], f"eval/{G}/random/seat0/win_rate" in r)] = r
    return [latest[k] for k in sorted(latest)]


def rate(r: dict, key: str) -> str:
    return f"{r[key]:.2f} [{r[key + '_low']:.2f}, {r[key + '_high']:.2f}]"


for name in ("plain", "fsp"):
    rows = rows_of(HERE / f"{name}.metrics.jsonl")
    print(f"\n### {name}: evaluations (100 games per seat)\n")
    print("| step | opponent | seat | win | draw | loss |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if f"eval/{G}/random/seat0/win_rate" not in r:
            continue
        for opp in ("random", "optimal"):
            for seat in (0, 1):
                k = f"eval/{G}/{opp}/seat{seat}/"
                print(
                    f"| {r['step']} | {opp} | {seat} | {rate(r, k + 'win_rate')} | "
                    f"{rate(r, k + 'draw_rate')} | {rate(r, k + 'loss_rate')} |"
                )
    train = [r for r in rows if "train/entropy" in r]
    label = (
        "self-play outcomes per 25 steps (seat 0 wins / draws / seat 1 wins; entropy)"
        if name == "plain"
        else "the policy's results per 25 steps, mostly against pool members (its win rate "
        "as seat 0 / draws / its win rate as seat 1; entropy)"
    )
    print(f"\n{name}: {label}\n")
    for lo in range(0, 150, 25):
        part = [r for r in train if lo < r["step"] <= lo + 25]
        if not part:
            continue
        mean = lambda key: sum(r[key] for r in part) / len(part)  # noqa: E731
        print(
            f"steps {lo + 1}-{lo + 25}: {mean(f'train/{G}/seat0/win_rate'):.2f} / "
            f"{mean(f'train/{G}/draw_rate'):.2f} / {mean(f'train/{G}/seat1/win_rate'):.2f}; "
            f"entropy {mean('train/entropy'):.2f}"
        )
