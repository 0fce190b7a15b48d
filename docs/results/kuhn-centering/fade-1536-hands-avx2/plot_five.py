"""Four times the hands (1,536 a step) over five seeds beside the preset's 384 hands (the
fade) of the same seed: exact exploitability of the live policy at each evaluation.
Seeds 0 and 2 ran in bf16 on the AVX512-BF16 machine (`../fade-1536-hands/`), seeds 1, 3
and 4 in fp32 on the AVX2 machine (this folder); the 384-hand runs are the fade's bf16
seeds (`../fade/`). `python plot_five.py` writes `five-seeds.png`."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
EXPL = "eval/KuhnPokerSingle-v0/exploitability_t1"
HANDS_1536 = {
    0: HERE.parent / "fade-1536-hands" / "seed0.metrics.jsonl",
    1: HERE / "seed1" / "metrics.jsonl",
    2: HERE.parent / "fade-1536-hands" / "seed2.metrics.jsonl",
    3: HERE / "seed3" / "metrics.jsonl",
    4: HERE / "seed4" / "metrics.jsonl",
}


def curve(path: Path) -> tuple[list[int], list[float]]:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    ev = [r for r in rows if EXPL in r]
    return [r["step"] for r in ev], [r[EXPL] for r in ev]


fig, ax = plt.subplots(figsize=(8, 4.5))
for seed, path in HANDS_1536.items():
    ax.plot(*curve(path), "-", marker="o", ms=3, color=f"C{seed}", label=f"seed {seed}, 1,536")
    fade = HERE.parent / "fade" / f"seed{seed}.metrics.jsonl"
    ax.plot(*curve(fade), ":", color=f"C{seed}", label=f"seed {seed}, 384 (bf16)")
ax.axhline(0.05, color="grey", lw=0.8)
ax.set_xlabel("step")
ax.set_ylabel("exploitability (live policy)")
ax.set_title("Kuhn: 1,536 hands a step (solid) vs 384 (dotted)")
ax.legend(ncol=2, fontsize=7)
fig.tight_layout()
fig.savefig(HERE / "five-seeds.png", dpi=110)
