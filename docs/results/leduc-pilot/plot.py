"""Exact Leduc exploitability (live weights, and averaged ones where a run kept them) and
where a best responder gains against the live weights (by seat and betting round) over the
steps of each run in a folder (one subfolder per run, its metrics.jsonl: this folder's
pilots, or the seeds of `spiral seeds`), into FOLDER/leduc-curves.png.

    python docs/results/leduc-pilot/plot.py [FOLDER]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
GAME = "eval/LeducPoker-v0/"


def curves(metrics: Path) -> dict[str, list[tuple[int, float]]]:
    found: dict[str, list[tuple[int, float]]] = {}
    for line in metrics.read_text().splitlines():
        row = json.loads(line)
        for key, value in row.items():
            wanted = key.endswith("exploitability_t1") or (
                "br_gain" in key and "averaged" not in key  # the live weights' gains only
            )
            if key.startswith(GAME) and wanted:
                found.setdefault(key.removeprefix(GAME), []).append((row["step"], value))
    return found


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    runs = sorted(p.parent for p in folder.glob("*/metrics.jsonl"))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for run in runs:
        for key, points in sorted(curves(run / "metrics.jsonl").items()):
            steps, values = zip(*points, strict=True)
            ax = axes[0] if "exploitability" in key else axes[1]
            label = f"{run.name}: {key.removesuffix('_t1')}"
            ax.plot(steps, values, marker="o", label=label)
    axes[0].axhline(2.3736, color="grey", linestyle=":", label="uniform policy")
    axes[0].set(title="exact exploitability (chips)", xlabel="step")
    axes[1].set(title="what a best responder gains, by seat and round", xlabel="step")
    for ax in axes:
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(folder / "leduc-curves.png", dpi=110)


if __name__ == "__main__":
    main()
