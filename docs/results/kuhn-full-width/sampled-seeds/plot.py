"""Sampled beside full width on Kuhn, the recipe's keys and the same seeds: the exact
exploitability of the live and the averaged weights at every evaluation (every 20 steps),
sampled (`seed*/`, `rollout=sampled`, 384 hands a step) against full width
(`../seeds/seed*/`). `python docs/results/kuhn-full-width/sampled-seeds/plot.py` writes
`curves.png`."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
KEYS = {
    "live": "eval/KuhnPokerSingle-v0/exploitability_t1",
    "averaged": "eval/KuhnPokerSingle-v0/averaged/exploitability_t1",
}


def curve(path: Path, key: str) -> tuple[list[int], list[float]]:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    found = [r for r in rows if key in r]
    return [r["step"] for r in found], [r[key] for r in found]


fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
for ax, (name, key) in zip(axes, KEYS.items(), strict=True):
    for folder in sorted(HERE.glob("seed*/")):
        k = int(folder.name.removeprefix("seed"))
        ax.plot(*curve(folder / "metrics.jsonl", key), color=f"C{k}", lw=1.2, marker="o",
                ms=3, label=f"sampled, {folder.name}")  # fmt: skip
        twin = HERE.parent / "seeds" / folder.name / "metrics.jsonl"
        ax.plot(*curve(twin, key), color=f"C{k}", lw=1, ls="--", label=f"full width, {folder.name}")
    ax.axhline(0.05, color="black", ls=":", lw=1)
    ax.set_title(f"{name} weights")
    ax.set_xlabel("step")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
axes[0].set_ylabel("exact exploitability")
fig.tight_layout()
fig.savefig(HERE / "curves.png", dpi=110)
