"""An exact tabular twin of the learner's update on single-hand Kuhn poker, to choose how
often the KL's snapshot magnet is refreshed before spending CPU hours on the model.

    python docs/results/kuhn-centering/kuhn_tabular_twin.py [OUT_DIR]

The policy is a table of logits (12 information states x 2 moves, one table for both
seats, as one model plays both), updated by exact expected gradient ascent on what the
model's loss estimates from samples: each seat's expected chips (the policy gradient),
plus `tau` x the entropy and minus `lam` x the KL to the magnet at every state, weighted
by how often play reaches it (as the sampled positions weigh them). The magnet is a copy
of the table, refreshed every `interval` updates, or ("converged") when the KL to it has
stopped moving: its relative change over the last `WINDOW` updates below `TOL`, the
inner regularised game solved. Exploitability is OpenSpiel's, exact; the average policy
is the reach-weighted mixture of the tables seen in the second half
(`spiral/analysis/iterate_average.py`).

Writes OUT_DIR/runs.jsonl (one row per setting: final exploitability of the last
iterate and of the second-half average, refreshes), OUT_DIR/table.md and
OUT_DIR/curves.png.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from spiral.analysis.exploitability import KUHN_CARDS, kuhn_exploitability
from spiral.analysis.iterate_average import average_report, table_policy

HISTORIES = ("", "p", "b", "pb")  # decision points; seat = len(history) % 2
DEALS = [(a, b) for a in range(3) for b in range(3) if a != b]
STEPS, EVERY, WINDOW, TOL = 4000, 25, 50, 1e-3


def _payoff0(history: str, cards: tuple[int, int]) -> float:
    """Seat 0's chips at a terminal history."""
    if history == "bp":
        return 1.0
    if history == "pbp":
        return -1.0
    stake = 1.0 if history == "pp" else 2.0
    return stake if cards[0] > cards[1] else -stake


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _index(card: int, history: str) -> int:
    return card * 4 + HISTORIES.index(history)


def gradient(
    logits: np.ndarray, magnet: np.ndarray, tau: float, lam: float
) -> tuple[np.ndarray, float]:
    """The exact ascent direction of the regularised objective, and the reach-weighted KL
    to the magnet."""
    pi, mu = _softmax(logits), _softmax(magnet)
    grad = np.zeros_like(logits)
    visit = np.zeros(12)
    chance = 1.0 / len(DEALS)

    def value0(h: str, reach: tuple[float, float], cards: tuple[int, int]) -> float:
        """Seat 0's expected chips from history h; adds each state's terms on the way."""
        if h in ("pp", "bp", "bb", "pbp", "pbb"):
            return _payoff0(h, cards)
        seat = len(h) % 2
        i = _index(cards[seat], h)
        q0 = np.array(
            [value0(h + m, _step(reach, seat, pi[i, k]), cards) for k, m in enumerate("pb")]
        )
        v0 = float(pi[i] @ q0)
        sign = 1.0 if seat == 0 else -1.0  # the acting seat's own chips
        grad[i] += chance * reach[1 - seat] * reach[seat] * pi[i] * sign * (q0 - v0)
        visit[i] += chance * reach[0] * reach[1]
        return v0

    for cards in DEALS:
        value0("", (1.0, 1.0), cards)
    log_pi, log_mu = np.log(pi), np.log(mu)
    entropy = -(pi * log_pi).sum(-1, keepdims=True)
    kl = (pi * (log_pi - log_mu)).sum(-1, keepdims=True)
    d_entropy = -pi * (log_pi + entropy)
    d_kl = pi * (log_pi - log_mu - kl)
    grad += visit[:, None] * (tau * d_entropy - lam * d_kl)
    return grad, float((visit * kl[:, 0]).sum())


def _step(reach: tuple[float, float], seat: int, p: float) -> tuple[float, float]:
    return (reach[0] * p, reach[1]) if seat == 0 else (reach[0], reach[1] * p)


def table(logits: np.ndarray) -> dict[str, float]:
    """P(bet or call) per state, in the metrics' naming (`Jpb`, ...)."""
    pi = _softmax(logits)
    return {KUHN_CARDS[c] + h: float(pi[_index(c, h), 1]) for c in range(3) for h in HISTORIES}


def run(interval: int | str, eta: float, tau: float, lam: float) -> dict:
    logits = np.zeros((12, 2))
    magnet = logits.copy()
    kls: list[float] = []
    curve, tables, refreshes = [], [], 0
    for step in range(STEPS):
        converged = (
            interval == "converged"
            and len(kls) > WINDOW
            and abs(kls[-1] - kls[-WINDOW]) <= TOL * max(kls[-1], 1e-12)
        )
        if (isinstance(interval, int) and step % interval == 0) or converged:
            magnet, kls, refreshes = logits.copy(), [], refreshes + 1
        grad, kl = gradient(logits, magnet, tau, lam)
        kls.append(kl)
        logits = logits + eta * grad
        if step % EVERY == 0 or step == STEPS - 1:
            t = table(logits)
            curve.append((step, kuhn_exploitability(table_policy(t))["exploitability"]))
            tables.append(t)
    half = tables[len(tables) // 2 :]
    return {
        "interval": interval,
        "eta": eta,
        "tau": tau,
        "lam": lam,
        "final_exploitability": curve[-1][1],
        "second_half_average_exploitability": average_report(half)["exploitability"],
        "max_exploitability_last_quarter": max(e for s, e in curve if s >= 0.75 * STEPS),
        "refreshes": refreshes,
        "curve": curve,
    }


def write_table(out: Path, lines: list[str]) -> Any:
    """Write and print OUT/table.md; matplotlib's pyplot (Agg) if it is installed, else None."""
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "kuhn-tabular-twin")
    out.mkdir(parents=True, exist_ok=True)
    settings: list[tuple[int | str, float, float, float]] = []
    for eta in (1.0, 10.0, 30.0):
        settings += [(k, eta, 0.1, 0.6) for k in (1, 10, 100, 1000, "converged")]
        settings.append((1, eta, 0.0, 0.0))  # plain policy gradient: no regulariser
    runs = [run(*s) for s in settings]
    with (out / "runs.jsonl").open("w") as f:
        for r in runs:
            f.write(json.dumps(r) + "\n")
    lines = [
        f"Exact tabular twin, {STEPS} updates, step size eta, entropy tau, KL lam.",
        "",
        "| magnet refresh | eta | tau | lam | refreshes | last iterate | max, last quarter | "
        "second-half average |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r['interval']} | {r['eta']} | {r['tau']} | {r['lam']} | {r['refreshes']} | "
            f"{r['final_exploitability']:.4f} | {r['max_exploitability_last_quarter']:.4f} | "
            f"{r['second_half_average_exploitability']:.4f} |"
        )
    plt = write_table(out, lines)
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in runs:
        steps, values = zip(*r["curve"], strict=True)
        if r["eta"] != 10.0:
            continue
        label = f"refresh {r['interval']}" + (" (no regulariser)" if r["tau"] == 0 else "")
        ax.plot(steps, values, label=label)
    ax.set_title("step size 10")
    ax.set_yscale("log")
    ax.set_xlabel("update")
    ax.set_ylabel("exploitability")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=120)


if __name__ == "__main__":
    main()
