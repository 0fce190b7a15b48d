"""Full-width Kuhn runs: the exact exploitability of the live policy at every step
(`full_width/KuhnPokerSingle-v0/exploitability`, from the rows each step scored), one
panel for the pilots (`pilots/*/`, one seed each) and one for the seeds of the chosen
keys (`seeds/seed*/`). `python docs/results/kuhn-full-width/plot.py` writes `curves.png`."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
KEY = "full_width/KuhnPokerSingle-v0/exploitability"


def curve(path: Path) -> tuple[list[int], list[float]]:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    found = [r for r in rows if KEY in r]
    return [r["step"] for r in found], [r[KEY] for r in found]


fig, axes = plt.subplots(1, 2, figsize=(14, 4.5), sharey=True)
for k, folder in enumerate(sorted((HERE / "pilots").glob("*/"))):
    axes[0].plot(*curve(folder / "metrics.jsonl"), color=f"C{k}", lw=1, label=folder.name)
for k, folder in enumerate(sorted((HERE / "seeds").glob("seed*/"))):
    axes[1].plot(*curve(folder / "metrics.jsonl"), color=f"C{k}", lw=1, label=folder.name)
for ax, title in zip(axes, ("pilots (seed 0)", "the chosen keys over seeds"), strict=True):
    ax.axhline(0.05, color="black", ls=":", lw=1)
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
axes[0].set_ylabel("exact exploitability (live policy)")
fig.tight_layout()
fig.savefig(HERE / "curves.png", dpi=110)
