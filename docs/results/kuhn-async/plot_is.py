"""Kuhn, the preset's own loss (`importance_sampling`, unclipped ratios): the sync loop's
runs on file (seeds 0-3) vs the async
actor-learner with a staleness bound of 2 (seeds 0-4) and of 1. `python plot_is.py` -> `is-sync-vs-async.png`: exploitability of the live weights
(top) and the largest importance ratio of each step's tokens (bottom, log scale; until
ratio_max was fixed the learner reported the token-weighted mean of its micro-batches' largest
ratios, a lower bound of the largest)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
P = "eval/KuhnPokerSingle-v0/exploitability_t1"
RUNS = {
    "sync (make train)": HERE.parent / "kuhn-make-train" / "metrics.jsonl",
    "sync (bf16)": HERE.parent / "kuhn-precision" / "bf16-after.metrics.jsonl",
    "sync (fp32)": HERE.parent / "kuhn-precision" / "fp32-before.metrics.jsonl",
    "sync, seed 1": HERE / "sync-is-seed1.metrics.jsonl",
    "sync, seed 2": HERE / "sync-is-seed2.metrics.jsonl",
    "sync, seed 3": HERE / "sync-is-seed3.metrics.jsonl",
    "async, bound 2, seed 0": HERE / "async-is-st2.metrics.jsonl",
    "async, bound 2, seed 1": HERE / "async-is-st2-seed1.metrics.jsonl",
    "async, bound 2, seed 2": HERE / "async-is-st2-seed2.metrics.jsonl",
    "async, bound 2, seed 3": HERE / "async-is-st2-seed3.metrics.jsonl",
    "async, bound 2, seed 4": HERE / "async-is-st2-seed4.metrics.jsonl",
    "async, bound 1, seed 0": HERE / "async-is-st1.metrics.jsonl",
}
fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
for i, (name, path) in enumerate(RUNS.items()):
    if not path.exists():
        continue
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    style = "-o" if name.startswith("async") else ":o"
    ev = [r for r in rows if P in r]
    top.plot([r["step"] for r in ev], [r[P] for r in ev], style, ms=3, color=plt.cm.tab20(i), label=name)
    tr = [r for r in rows if "train/ratio_max" in r]
    bottom.semilogy(
        [r["step"] for r in tr], [r["train/ratio_max"] for r in tr], color=plt.cm.tab20(i), lw=0.8
    )
top.axhline(1 / 3, color="grey", lw=0.5, ls=":")
top.set(ylabel="exact exploitability (T=1), live weights", ylim=(0, 0.5))
bottom.set(xlabel="step", ylabel="largest importance ratio in the step")
top.legend(fontsize=7)
fig.tight_layout()
fig.savefig(HERE / "is-sync-vs-async.png", dpi=110)
