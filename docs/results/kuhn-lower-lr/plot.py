"""Exploitability (live and averaged) of the runs resumed from seed 0's step 50 with a
constant lower learning rate. `python plot.py` (reads lr*.metrics.jsonl here)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
P = "eval/KuhnPokerSingle-v0/"
fig, ax = plt.subplots(figsize=(7, 4))
for i, path in enumerate(sorted(HERE.glob("lr*.metrics.jsonl"))):
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    ev = [r for r in rows if P + "exploitability_t1" in r]
    name = path.name.split(".metrics")[0]
    ax.plot(
        [r["step"] for r in ev],
        [r[P + "exploitability_t1"] for r in ev],
        "-o",
        color=f"C{i}",
        label=f"{name} live",
    )
    av = [r for r in ev if P + "averaged/exploitability_t1" in r]
    ax.plot(
        [r["step"] for r in av],
        [r[P + "averaged/exploitability_t1"] for r in av],
        "--",
        color=f"C{i}",
        label=f"{name} averaged",
    )
ax.axhline(0.10, color="grey", lw=0.8, ls=":")
ax.set(xlabel="step", ylabel="exact exploitability (T=1)", ylim=(0, 0.35))
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(HERE / "exploitability.png", dpi=110)
