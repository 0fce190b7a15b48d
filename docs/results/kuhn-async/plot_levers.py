"""Two step-size levers for the async loop with a staleness bound of 2, against
the plain bound-2 runs and the sync runs of the same seeds (`importance_sampling`, the
preset's loss). `python plot_levers.py` -> `levers.png`: exploitability of the live weights
(top) and each step's learning rate after the lever (bottom, log scale)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
P = "eval/KuhnPokerSingle-v0/exploitability_t1"
# (label, file, colour, line style): one colour per seed, one style per arm.
RUNS = [
    (
        "sync, seed 0 (make train)",
        HERE.parent / "kuhn-make-train" / "metrics.jsonl",
        0,
        ":",
    ),
    ("async bound 2, seed 0", HERE / "async-is-st2.metrics.jsonl", 0, "--"),
    (
        "async bound 2 + lr_staleness=inverse, seed 0",
        HERE / "async-inv-st2-seed0.metrics.jsonl",
        0,
        "-.",
    ),
    ("async bound 2 + lr_kl_target=0.05, seed 0", HERE / "async-kl-st2-seed0.metrics.jsonl", 0, "-"),
    ("sync, seed 2", HERE / "sync-is-seed2.metrics.jsonl", 1, ":"),
    ("async bound 2, seed 2", HERE / "async-is-st2-seed2.metrics.jsonl", 1, "--"),
    ("async bound 2 + lr_kl_target=0.05, seed 2", HERE / "async-kl-st2-seed2.metrics.jsonl", 1, "-"),
    ("sync, seed 3", HERE / "sync-is-seed3.metrics.jsonl", 2, ":"),
    ("async bound 2, seed 3", HERE / "async-is-st2-seed3.metrics.jsonl", 2, "--"),
    ("async bound 2 + lr_kl_target=0.05, seed 3", HERE / "async-kl-st2-seed3.metrics.jsonl", 2, "-"),
]
fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
for name, path, colour, style in RUNS:
    if not path.exists():
        continue
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    ev = [r for r in rows if P in r]
    colour_of = plt.cm.tab10(colour)
    top.plot(
        [r["step"] for r in ev],
        [r[P] for r in ev],
        style,
        marker="o",
        ms=3,
        color=colour_of,
        label=name,
    )
    if "+" in name:
        tr = [r for r in rows if "train/lr" in r]
        bottom.semilogy(
            [r["step"] for r in tr], [r["train/lr"] for r in tr], style, color=colour_of, lw=0.8
        )
top.axhline(1 / 3, color="grey", lw=0.5, ls=":")
top.set(ylabel="exact exploitability (T=1), live weights", ylim=(0, 0.5))
bottom.set(xlabel="step", ylabel="learning rate of the step (levers)")
top.legend(fontsize=7)
fig.tight_layout()
fig.savefig(HERE / "levers.png", dpi=110)
