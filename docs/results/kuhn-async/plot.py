"""Kuhn (preset embedded-kuhn, seed 0 unless named): the sync loop (its importance_sampling
default and ppo, seeds 0, 1 and 2) vs the async actor-learner with a lag of one version (ppo)
and of two (ppo seeds 0 and 1, truncated importance sampling, 30 lock-step steps first). `python plot.py` -> `sync-vs-async.png`: exploitability
of the live and the averaged weights (top) and the clip fraction (bottom)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
P = "eval/KuhnPokerSingle-v0/"
RUNS = {
    "sync, importance_sampling (bf16)": HERE.parent
    / "kuhn-precision"
    / "bf16-after.metrics.jsonl",
    "sync, ppo": HERE / "sync-ppo.metrics.jsonl",
    "async, lag 1, ppo": HERE / "async-lag1.metrics.jsonl",
    "async, lag 2, ppo": HERE / "async-lag2.metrics.jsonl",
    "async, lag 2, truncated IS": HERE / "async-lag2-tis.metrics.jsonl",
    "sync, ppo, seed 1": HERE / "sync-ppo-seed1.metrics.jsonl",
    "async, lag 2, ppo, seed 1": HERE / "async-lag2-seed1.metrics.jsonl",
    "async, lag 2, ppo, 30 lock-step steps (stopped at 61)": HERE
    / "async-lag2-lockstep30.metrics.jsonl",
    "sync, ppo, seed 2 (stopped at 57)": HERE / "sync-ppo-seed2.metrics.jsonl",
}
fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7.5), sharex=True)
for i, (name, path) in enumerate(RUNS.items()):
    if not path.exists():
        continue
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
    tr = [r for r in rows if "train/clip_frac" in r]
    bottom.plot(
        [r["step"] for r in tr],
        [r["train/clip_frac"] for r in tr],
        color=f"C{i}",
        lw=0.8,
        label=name,
    )
top.axhline(1 / 3, color="grey", lw=0.5, ls=":")
top.set(ylabel="exact exploitability (T=1)", ylim=(0, 0.62))
bottom.set(xlabel="step", ylabel="clip fraction (ratio outside 1 +- 0.2)")
top.legend(fontsize=6, ncol=2, loc="upper right")
bottom.legend(fontsize=7)
fig.tight_layout()
fig.savefig(HERE / "sync-vs-async.png", dpi=110)
