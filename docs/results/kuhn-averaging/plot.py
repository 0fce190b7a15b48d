"""Plot the offline averaging runs: exploitability of the live weights and of their
moving averages, per seed. `python plot.py s0.avg.jsonl s1.avg.jsonl ... out.png`"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(paths: list[Path], out: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    for i, path in enumerate(paths):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        steps = [r["step"] for r in rows]
        keys = [k for k in rows[0] if k != "step"]
        for k in keys:
            style = "-" if k == "live" else "--"
            label = f"{path.name.split('.')[0]} {k}"
            color = f"C{i * len(keys) + keys.index(k)}"
            axes[0].plot(
                steps, [r[k]["exploitability"] for r in rows], style, label=label, color=color
            )
            axes[1].plot(
                steps, [r[k]["value_vs_nash"] for r in rows], style, label=label, color=color
            )
    axes[0].axhline(0.10, color="grey", lw=0.8, ls=":")
    axes[0].set(xlabel="step", ylabel="exploitability (exact, T=1)", ylim=(0, 0.5))
    axes[1].axhline(-0.03, color="grey", lw=0.8, ls=":")
    axes[1].set(xlabel="step", ylabel="value vs Nash (mean of seats)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:-1]], Path(sys.argv[-1]))
