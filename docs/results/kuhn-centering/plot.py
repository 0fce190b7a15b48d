"""Private-information centering on the Kuhn preset (beta 0.8; 0.95 held; 0.95 fading to
0.5 over the run; that fade with prioritised population play) beside the preset without
it, per seed (commands in README.md): exact exploitability of the live policy at each
evaluation (population play: also its pool's average policy, dotted). The preset's runs are the bf16 ones of the same seeds (seed 0: the fresh-clone
`make train` of 2026-11-26; seeds 1-3: the sync runs kept with the async study; no seed 4).
`python plot.py` writes `curves.png`."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
RESULTS = HERE.parent
EXPL = "eval/KuhnPokerSingle-v0/exploitability_t1"
PRESET = {
    0: RESULTS / "kuhn-make-train-2026-11-26" / "metrics.jsonl",
    **{s: RESULTS / "kuhn-async" / f"sync-is-seed{s}.metrics.jsonl" for s in (1, 2, 3)},
}


def curve(path: Path) -> tuple[list[int], list[float]]:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    ev = [r for r in rows if EXPL in r]
    return [r["step"] for r in ev], [r[EXPL] for r in ev]


POOL = "eval/KuhnPokerSingle-v0/pool_average/exploitability_t1"


def pool_curve(path: Path) -> tuple[list[int], list[float]]:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    ev = [r for r in rows if POOL in r]
    return [r["step"] for r in ev], [r[POOL] for r in ev]


fig, axes = plt.subplots(1, 4, figsize=(21, 4.2), sharey=True)
for seed in range(5):
    path = HERE / f"seed{seed}.metrics.jsonl"
    if path.exists():
        axes[0].plot(*curve(path), marker="o", ms=3, color=f"C{seed}", label=f"seed {seed}")
    for folder, style, name in (("beta0.95", ":", "0.95"), ("fade", "-", "0.95 -> 0.5")):
        path = HERE / folder / f"seed{seed}.metrics.jsonl"
        if path.exists():
            axes[1].plot(*curve(path), style, marker="o", ms=3, color=f"C{seed}",
                         label=f"seed {seed}, {name}")
    path = HERE / "fsp-fade" / f"seed{seed}.metrics.jsonl"
    if path.exists():
        axes[2].plot(*curve(path), marker="o", ms=3, color=f"C{seed}", label=f"seed {seed}")
        axes[2].plot(*pool_curve(path), ":", color=f"C{seed}", label=f"seed {seed}, pool")
    if seed in PRESET:
        axes[3].plot(*curve(PRESET[seed]), "--", marker="s", ms=3, color=f"C{seed}",
                     label=f"seed {seed}")
titles = (
    "private_centering=0.8",
    "0.95 held (dotted), 0.95 -> 0.5 (solid)",
    "0.95 -> 0.5 with population play",
    "the preset",
)
for ax, title in zip(axes, titles, strict=True):
    ax.axhline(1 / 3, color="grey", lw=0.8, ls=":")
    ax.axhline(0.05, color="grey", lw=0.8, ls="-.")
    ax.set(xlabel="step", title=f"Kuhn, {title}")
    ax.legend(fontsize=8)
axes[0].set_ylabel("exploitability (live, exact)")
fig.tight_layout()
fig.savefig(HERE / "curves.png", dpi=110)
