"""`make train` before the speed work (commit 2956061: fp32, the model's own decode) and after
(commit 3840c50: bf16 under dtype=auto, prefix cache, merged LoRA, the packed decode step),
same preset and seed, run side by side, each pinned to one core with one thread.
`python plot.py` -> `side-by-side.png` and a summary on stdout."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
P = "eval/KuhnPokerSingle-v0/"
RUNS = {"before (2956061)": "before", "after (3840c50)": "after"}


def rows(name: str) -> list[dict]:
    text = (HERE / f"{name}.metrics.jsonl").read_text()
    return [json.loads(x) for x in text.splitlines() if x.strip()]


fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
for i, (label, name) in enumerate(RUNS.items()):
    data = rows(name)
    ev = [r for r in data if P + "exploitability_t1" in r]
    top.plot([r["step"] for r in ev], [r[P + "exploitability_t1"] for r in ev], "-o", ms=3,
             color=f"C{i}", label=f"{label} live")  # fmt: skip
    av = [r for r in ev if P + "averaged/exploitability_t1" in r]
    top.plot([r["step"] for r in av], [r[P + "averaged/exploitability_t1"] for r in av], "--",
             color=f"C{i}", label=f"{label} averaged")  # fmt: skip
    steps = [r for r in data if "time/total" in r]
    bottom.plot([r["step"] for r in steps], [r["time/total"] for r in steps], color=f"C{i}",
                lw=0.8, label=label)  # fmt: skip
    med = {k: statistics.median(r[k] for r in steps) for k in ("time/total", "time/train", "time/sample")}
    rss = max(r.get("perf/peak_rss_mb", 0.0) for r in steps)
    print(f"{label}: steps {len(steps)}, median s/step total {med['time/total']:.1f} "
          f"(train {med['time/train']:.1f}, sample {med['time/sample']:.1f}), "
          f"max step peak RSS {rss:.0f} MB, final live {ev[-1][P + 'exploitability_t1']:.3f}")  # fmt: skip
top.set(ylabel="exact exploitability (T=1)", ylim=(0, 0.5))
top.legend(fontsize=7)
bottom.set(xlabel="step", ylabel="seconds per step (one core)")
bottom.legend(fontsize=7)
fig.tight_layout()
fig.savefig(HERE / "side-by-side.png", dpi=120)
