"""TicTacToe with the brief prompt: the runs kept here side by side (commands in
README.md). Panels: greedy win rate against the random player and greedy draw rate
against the randomised perfect player, per seat (50 games a seat during the runs, 95%
Wilson intervals), and the policy's entropy over the legal moves. `python plot.py`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
G = "TicTacToe-v0"
RUNS = {
    "self-play, entropy 0.05": "run-41-steps.metrics.jsonl",
    "self-play, entropy 0.2->0.05, magnet": "run-magnet-23-steps.metrics.jsonl",
    "sparring: self, random, perfect": "run-sparring.metrics.jsonl",
}


def wilson(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
win_ax, draw_ax, ent_ax = axes
for i, (name, file) in enumerate(RUNS.items()):
    path = HERE / file
    if not path.exists():
        continue
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    ev = [r for r in rows if f"eval/{G}/random/seat0/win_rate" in r]
    steps = [r["step"] for r in ev]
    for seat, style in ((0, "-o"), (1, "--s")):
        for ax, key in ((win_ax, "random/seat{}/win_rate"), (draw_ax, "optimal/seat{}/draw_rate")):
            ys = [r[f"eval/{G}/" + key.format(seat)] for r in ev]
            lo, hi = zip(*(wilson(y, 50) for y in ys)) if ys else ((), ())
            ax.plot(steps, ys, style, ms=3, color=f"C{i}", label=f"{name}, seat {seat}")
            ax.fill_between(steps, lo, hi, color=f"C{i}", alpha=0.08)
    train = [r for r in rows if "train/entropy" in r]
    ent_ax.plot([r["step"] for r in train], [r["train/entropy"] for r in train], color=f"C{i}")
win_ax.axhline(0.9, color="grey", lw=0.8, ls=":")
win_ax.axhline(0.7, color="grey", lw=0.8, ls="-.")
win_ax.set(title="greedy win rate vs random (targets 0.9 / 0.7)", xlabel="step", ylim=(0, 1))
draw_ax.axhline(0.5, color="grey", lw=0.8, ls=":")
draw_ax.set(title="greedy draw rate vs the perfect player (target 0.5)", xlabel="step", ylim=(0, 1))
ent_ax.set(title="policy entropy over the legal moves", xlabel="step", ylabel="nats")
win_ax.legend(fontsize=6)
fig.tight_layout()
fig.savefig(HERE / "runs.png", dpi=110)
print("wrote", HERE / "runs.png")
