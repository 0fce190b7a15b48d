"""Full-width Leduc runs beside the sampled recipe's: the exact exploitability of the live
policy at every full-width step (`full_width/LeducPoker-v0/exploitability`, from the rows
each step scored) and what a best responder gains in each betting round (both seats
summed), for every run folder here (`seed*/`, `pilots/*/`); the same keys sampled
(`sampled-seed*/`, evaluated every 5 steps) dashed, and the sampled recipe's evaluations
(`docs/results/leduc-recipe/seed*/`) in grey.
`python docs/results/leduc-full-width/plot.py` writes `curves.png`."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
SAMPLED = HERE.parent / "leduc-recipe"
FW = "full_width/LeducPoker-v0/"
EV = "eval/LeducPoker-v0/"


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def series(path: Path, prefix: str, suffix: str = "") -> dict[str, tuple[list, list]]:
    found = [r for r in rows(path) if f"{prefix}exploitability{suffix}" in r]
    steps = [r["step"] for r in found]

    def gain(r: dict, rnd: int) -> float:
        return sum(r[f"{prefix}br_gain_seat{s}_round{rnd}{suffix}"] for s in (0, 1))

    return {
        "exploitability": (steps, [r[f"{prefix}exploitability{suffix}"] for r in found]),
        "round 1 gain": (steps, [gain(r, 1) for r in found]),
        "round 2 gain": (steps, [gain(r, 2) for r in found]),
    }


runs = sorted(HERE.glob("seed*/metrics.jsonl")) + sorted(HERE.glob("pilots/*/metrics.jsonl"))
fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
for path in sorted(SAMPLED.glob("seed*/metrics.jsonl")):
    for ax, (x, y) in zip(axes, series(path, EV, "_t1").values(), strict=True):
        ax.plot(x, y, color="grey", lw=0.8, marker=".", alpha=0.6)
for k, path in enumerate(runs):
    label = str(path.parent.relative_to(HERE))
    for ax, (x, y) in zip(axes, series(path, FW).values(), strict=True):
        ax.plot(x, y, color=f"C{k}", lw=1.2, label=label)
for k, path in enumerate(sorted(HERE.glob("sampled-seed*/metrics.jsonl"))):
    label = f"{path.parent.name} (same keys, sampled)"
    for ax, (x, y) in zip(axes, series(path, EV, "_t1").values(), strict=True):
        ax.plot(x, y, color=f"C{k}", lw=1.2, ls="--", marker="o", label=label)
for ax, title in zip(
    axes, ("exact exploitability (chips)", "round-1 gain", "round-2 gain"), strict=True
):
    ax.set_title(title + "; grey: the sampled recipe, seeds 0-4")
    ax.set_xlabel("step")
    ax.title.set_fontsize(9)
axes[0].axhline(1.16, color="black", ls=":", lw=1)
axes[0].legend(fontsize=7)
fig.tight_layout()
fig.savefig(HERE / "curves.png", dpi=110)
