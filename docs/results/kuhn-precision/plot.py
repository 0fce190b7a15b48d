"""`make train` before the speed work (fp32, commit 2956061) and after (bf16 under dtype=auto),
same preset and seed, plus the first fp32 make-train run of the preset: exploitability and step time.
`python plot.py` -> `before-after.png`."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
P = "eval/KuhnPokerSingle-v0/"
RUNS = {
    "fp32, first make train": HERE.parent / "kuhn-make-train" / "metrics.jsonl",
    "fp32 before (2956061)": HERE / "fp32-before.metrics.jsonl",
    "bf16 after": HERE / "bf16-after.metrics.jsonl",
}
fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
for i, (name, path) in enumerate(RUNS.items()):
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    ev = [r for r in rows if P + "exploitability_t1" in r]
    top.plot(
        [r["step"] for r in ev],
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
    steps = [r for r in rows if "time/total" in r]
    bottom.plot(
        [r["step"] for r in steps],
        [r["time/total"] for r in steps],
        color=f"C{i}",
        lw=0.8,
        label=name,
    )
top.set(ylabel="exact exploitability (T=1)", ylim=(0, 0.5))
bottom.set(xlabel="step", ylabel="seconds per step", ylim=(0, 30))
top.legend(fontsize=7)
bottom.legend(fontsize=7)
fig.tight_layout()
fig.savefig(HERE / "before-after.png", dpi=110)
