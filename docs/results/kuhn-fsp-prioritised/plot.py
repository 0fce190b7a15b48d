"""Exact Kuhn exploitability by step: prioritised population play (the seeds kept here)
beside plain self-play of the same preset (seeds 0-3). Run from the repository root:
`python docs/results/kuhn-fsp-prioritised/plot.py`."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
KEY = "eval/KuhnPokerSingle-v0/exploitability_t1"
POOL = "eval/KuhnPokerSingle-v0/pool_average/exploitability_t1"


def _seed(path: Path) -> int:
    return int(path.name.split("seed")[1].split(".")[0])


STYLES = {0: "-", 1: ":", 2: "--", 3: "-."}  # one line style per seed, shared by both arms
FSP = sorted(HERE.glob("variance-frac50-seed*.metrics.jsonl"))
# Plain self-play of the same preset and code: seed 0 is `make train` from a fresh clone.
PLAIN = {
    0: Path("docs/results/kuhn-make-train-2026-11-26/metrics.jsonl"),
    **{s: Path(f"docs/results/kuhn-async/sync-is-seed{s}.metrics.jsonl") for s in (1, 2, 3)},
}
RUNS = {
    **{f"prioritised FSP, seed {_seed(p)}": (p, "C3", STYLES[_seed(p)]) for p in FSP},
    **{f"plain self-play, seed {s}": (path, "C0", STYLES[s]) for s, path in PLAIN.items()},
}


def curve(path: Path, key: str) -> tuple[list[int], list[float]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    found = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
    return [s for s, _ in found], [v for _, v in found]


fig, ax = plt.subplots(figsize=(7, 4))
for label, (path, color, style) in RUNS.items():
    ax.plot(*curve(path, KEY), color=color, linestyle=style, marker="o", label=label)
for k, path in enumerate(FSP):
    label = "prioritised FSP's pool average" if k == 0 else None
    ax.plot(*curve(path, POOL), color="C1", linestyle=STYLES[_seed(path)], marker="s", label=label)
ax.axhline(0.0, color="grey", linewidth=0.5)
ax.set_xlabel("step")
ax.set_ylabel("exact exploitability (temperature 1)")
ax.set_title("Kuhn, embedded-kuhn preset")
ax.legend()
fig.tight_layout()
fig.savefig(HERE / "curves.png", dpi=120)
