"""The trust region on Kuhn beside the preset without it, seeds 1 and 2 (commands in
README.md). Panels: exact exploitability of the live policy at each evaluation; the
approx_kl each update took on its own rows before any shrink (`train/step_kl`, log
scale) with the bound; the policy's entropy. `python plot.py` writes `curves.png`."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
PLAIN = HERE.parent / "kuhn-async"
EXPL = "eval/KuhnPokerSingle-v0/exploitability_t1"
ARMS = {
    "preset (no trust region)": (PLAIN, "sync-is-seed{}.metrics.jsonl", "-"),
    "trust region 0.05, preset schedule (stopped)": (HERE, "preset-seed{}.metrics.jsonl", ":"),
    "trust region 0.05, lr 1e-3 throughout": (HERE, "lr1e-3-seed{}.metrics.jsonl", "--"),
}


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


fig, (ex_ax, kl_ax, ent_ax) = plt.subplots(1, 3, figsize=(15, 4.2))
for i, (name, (folder, pattern, style)) in enumerate(ARMS.items()):
    for seed, marker in ((1, "o"), (2, "s")):
        path = folder / pattern.format(seed)
        if not path.exists():
            continue
        data = rows(path)
        label = f"{name}, seed {seed}"
        ev = [r for r in data if EXPL in r]
        ex_ax.plot([r["step"] for r in ev], [r[EXPL] for r in ev], style, marker=marker,
                   ms=3, color=f"C{i}", label=label)
        tr = [r for r in data if "train/entropy" in r]
        ent_ax.plot([r["step"] for r in tr], [r["train/entropy"] for r in tr], style,
                    color=f"C{i}", lw=0.9)
        kl = [r for r in tr if "train/step_kl" in r]
        if kl:
            kl_ax.semilogy([r["step"] for r in kl], [max(r["train/step_kl"], 1e-4) for r in kl],
                           style, color=f"C{i}", lw=0.9)
ex_ax.axhline(1 / 3, color="grey", lw=0.8, ls=":")
ex_ax.axhline(0.05, color="grey", lw=0.8, ls="-.")
kl_ax.axhline(0.05, color="grey", lw=0.8, ls="-.")
ex_ax.set(xlabel="step", ylabel="exploitability (live)", title="Kuhn, exact exploitability")
kl_ax.set(xlabel="step", ylabel="approx_kl of the update on its rows", title="step size")
ent_ax.set(xlabel="step", ylabel="entropy (nats)", title="policy entropy")
ex_ax.legend(fontsize=7)
fig.tight_layout()
fig.savefig(HERE / "curves.png", dpi=110)
