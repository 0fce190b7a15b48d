"""Plain self-play vs population play (FSP, and FSP with fsp_current_fraction=0.5) on Kuhn
with the embedded-kuhn preset (p5's keys), seed 0:
exploitability of the live policy, of the averaged weights and (FSP) of the pool's
average policy, and the value against the Nash player. `python plot.py`."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
P = "eval/KuhnPokerSingle-v0/"
RUNS = {
    "plain (make train)": HERE.parent / "kuhn-make-train" / "metrics.jsonl",
    "FSP": HERE / "fsp-seed0.metrics.jsonl",
    "FSP, live share 0.5": HERE / "fsp-frac50-seed0.metrics.jsonl",
}
fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
for i, (name, path) in enumerate(RUNS.items()):
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    ev = [r for r in rows if P + "exploitability_t1" in r]
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
    pa = [r for r in ev if P + "pool_average/exploitability_t1" in r]
    if pa:
        top.plot(
            [r["step"] for r in pa],
            [r[P + "pool_average/exploitability_t1"] for r in pa],
            ":",
            color=f"C{i}",
            label=f"{name} pool average",
        )
    value = [(r[P + "value_vs_nash_seat0_t1"] + r[P + "value_vs_nash_seat1_t1"]) / 2 for r in ev]
    bottom.plot(steps, value, "-o", ms=3, color=f"C{i}", label=f"{name} live")
top.axhline(0.10, color="grey", lw=0.8, ls=":")
bottom.axhline(-0.03, color="grey", lw=0.8, ls=":")
top.set(ylabel="exact exploitability (T=1)", ylim=(0, 0.5))
bottom.set(xlabel="step", ylabel="value vs Nash (seat mean)")
top.legend(fontsize=7)
bottom.legend(fontsize=7)
fig.tight_layout()
fig.savefig(HERE / "plain-vs-fsp.png", dpi=110)
