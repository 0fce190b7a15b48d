"""Exploitability curves of the Kuhn ablation: python docs/results/ablation/plot.py"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

HERE = Path(__file__).parent
KEY = "eval/KuhnPokerSingle-v0/exploitability_t1"
ARMS = {
    "plain RAE (32 hands/step)": HERE / "plain.metrics.jsonl",
    "+ entropy/KL (32 hands/step)": HERE / "reg.metrics.jsonl",
    "+ big batches (512 hands/step)": HERE / "big.metrics.jsonl",
    "all (512 hands/step + entropy/KL)": HERE / "all.metrics.jsonl",
    "all, 120 steps (the preset run)": HERE.parent / "kuhn-regularised" / "metrics.jsonl",
}

fig, ax = plt.subplots(figsize=(8, 4.5))
for label, path in ARMS.items():
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    points = [(r["step"], r[KEY]) for r in rows if KEY in r]
    steps = [s for s, _ in points]
    ax.plot(steps, [e for _, e in points], marker=".", label=label)
ax.axhline(1 / 3, color="grey", lw=0.8, ls="--", label="best card-blind strategy (1/3)")
ax.set_xlabel("step")
ax.set_ylabel("exact exploitability (T = 1)")
ax.set_title("Kuhn ablation: same seed, lr 1e-3 cosine, focused prompt")
ax.legend(fontsize=8)
ax.grid(alpha=0.3)
fig.tight_layout()
fig.savefig(HERE / "exploitability.png", dpi=100)
