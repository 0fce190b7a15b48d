"""Exploitability (live and averaged) and value against the Nash player of the schedule
runs p1-p5. `python plot.py` (reads p*.metrics.jsonl here)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
P = "eval/KuhnPokerSingle-v0/"
fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
for i, path in enumerate(sorted(HERE.glob("p*.metrics.jsonl"))):
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    ev = [r for r in rows if P + "exploitability_t1" in r]
    name = path.name.split(".metrics")[0]
    steps = [r["step"] for r in ev]
    top.plot(
        steps,
        [r[P + "exploitability_t1"] for r in ev],
        "-o",
        ms=3,
        color=f"C{i}",
        label=f"{name} live",
    )
    av = [r for r in ev if P + "averaged/exploitability_t1" in r]
    top.plot(
        [r["step"] for r in av],
        [r[P + "averaged/exploitability_t1"] for r in av],
        "--",
        color=f"C{i}",
        label=f"{name} averaged",
    )
    value = [(r[P + "value_vs_nash_seat0_t1"] + r[P + "value_vs_nash_seat1_t1"]) / 2 for r in ev]
    bottom.plot(steps, value, "-o", ms=3, color=f"C{i}", label=f"{name} live")
top.axhline(0.10, color="grey", lw=0.8, ls=":")
bottom.axhline(-0.03, color="grey", lw=0.8, ls=":")
top.set(ylabel="exact exploitability (T=1)", ylim=(0, 0.55))
bottom.set(xlabel="step", ylabel="value vs Nash (seat mean)")
top.legend(fontsize=7)
bottom.legend(fontsize=7)
fig.tight_layout()
fig.savefig(HERE / "exploitability.png", dpi=110)
