"""TicTacToe, plain self-play vs population play (FSP, the original's pool defaults), same
keys and seed, 150 steps of 16 games (commands in docs/results.md). Panels: win rate
against the random player per seat and draw-or-win rate against the minimax player per
seat (100 games per seat, 95% Wilson intervals), the self-play outcome split (10-step
means: a collapse shows as one seat winning nearly every game) and the policy's entropy;
exact exploitability (best-response search) where `exploitability.json` has it.
`python plot.py`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
G = "TicTacToe-v0"
RUNS = {"plain": HERE / "plain.metrics.jsonl", "FSP": HERE / "fsp.metrics.jsonl"}


def wilson(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def rows_of(path: Path) -> list[dict]:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    latest: dict[tuple[int, bool], dict] = {}
    for r in rows:  # a resumed run repeats a step: keep the last row of each kind
        latest[(r["step"], f"eval/{G}/random/seat0/win_rate" in r)] = r
    return [latest[k] for k in sorted(latest)]


fig, axes = plt.subplots(2, 3, figsize=(15, 7))
(win_ax, opt_ax, exp_ax), (split_ax, ent_ax, league_ax) = axes
for i, (name, path) in enumerate(RUNS.items()):
    if not path.exists():
        continue
    rows = rows_of(path)
    ev = [r for r in rows if f"eval/{G}/random/seat0/win_rate" in r]
    steps = [r["step"] for r in ev]
    for seat, style in ((0, "-o"), (1, "--s")):
        for ax, kind in ((win_ax, "random"), (opt_ax, "optimal")):
            key = f"eval/{G}/{kind}/seat{seat}/"
            ys = [
                r[key + "win_rate"] + (r[key + "draw_rate"] if kind == "optimal" else 0) for r in ev
            ]
            ns = [100] * len(ys)
            lo, hi = zip(*(wilson(y, n) for y, n in zip(ys, ns))) if ys else ((), ())
            ax.plot(steps, ys, style, ms=3, color=f"C{i}", label=f"{name} seat {seat}")
            ax.fill_between(steps, lo, hi, color=f"C{i}", alpha=0.08)
    train = [r for r in rows if "train/entropy" in r]
    buckets = sorted({r["step"] // 10 for r in train})
    mid = [10 * b + 5 for b in buckets]
    for key, style in (("seat0/win_rate", "-"), ("draw_rate", ":"), ("seat1/win_rate", "--")):
        full = f"train/{G}/{key}"
        means = []
        for b in buckets:
            vals = [r[full] for r in train if r["step"] // 10 == b]
            means.append(sum(vals) / len(vals))
        split_ax.plot(
            mid, means, style, color=f"C{i}", label=f"{name} {key.replace('/win_rate', ' wins')}"
        )
    ent_ax.plot(
        [r["step"] for r in train],
        [r["train/entropy"] for r in train],
        color=f"C{i}",
        lw=0.8,
        label=name,
    )
EXPLOIT = HERE / "exploitability.json"  # {"base": report, run: {step: report}}
if EXPLOIT.exists():
    found = json.loads(EXPLOIT.read_text())
    base = found.get("base")
    for i, name in enumerate(RUNS):
        pts = sorted((int(k), v["exploitability"]) for k, v in found.get(name, {}).items())
        if base:
            pts = [(0, base["exploitability"]), *pts]
        exp_ax.plot([p[0] for p in pts], [p[1] for p in pts], "-o", color=f"C{i}", label=name)
exp_ax.axhline(0.9598, color="grey", lw=0.8, ls="--", label="uniform random (0.960)")
exp_ax.axhline(0.0, color="black", lw=0.8, ls=":", label="minimax (0)")
exp_ax.set(title="exact exploitability (temperature 1)", xlabel="step", ylim=(-0.02, 1.05))
LEAGUE = HERE / "fsp.league.json"
if LEAGUE.exists():
    ratings = json.loads(LEAGUE.read_text())["ratings"]
    members = sorted((int(k.split("_")[1]), v) for k, v in ratings.items() if k.startswith("step_"))
    league_ax.errorbar(
        [m[0] for m in members],
        [m[1]["mu"] for m in members],
        yerr=[2 * m[1]["sigma"] for m in members],
        fmt="o",
        ms=3,
        color="C1",
        label="pool member (mu +- 2 sigma)",
    )
    cur = ratings["policy"]
    league_ax.axhline(cur["mu"], color="C1", lw=0.8, label=f"current policy ({cur['mu']:.1f})")
league_ax.set(title="FSP league (openskill) at the end", xlabel="member's step", ylabel="rating mu")
win_ax.axhline(0.9678, color="grey", lw=0.8, ls=":")
win_ax.axhline(0.7775, color="grey", lw=0.8, ls="-.")
win_ax.set(title="win rate vs random (perfect player: 0.97 / 0.78)", ylabel="win rate", ylim=(0, 1))
opt_ax.set(title="draw-or-win rate vs minimax (perfect: 1)", ylabel="rate", ylim=(0, 1))
split_ax.set(
    title="outcomes, 10-step means (FSP: the policy's, per seat)",
    xlabel="step",
    ylabel="share of games",
    ylim=(0, 1),
)
ent_ax.set(title="policy entropy over the legal moves", xlabel="step", ylabel="nats")
for ax in axes.flat:
    ax.legend(fontsize=6)
fig.tight_layout()
fig.savefig(HERE / "plain-vs-fsp.png", dpi=110)
print("wrote", HERE / "plain-vs-fsp.png")
