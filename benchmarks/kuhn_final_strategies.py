"""Where finished Kuhn runs' last iterates lose: their strategy tables, each seat's
best-response value, and what mending one information state would buy.

    python benchmarks/kuhn_final_strategies.py OUT_DIR METRICS.jsonl...

For each run, the last logged strategy table (P(bet or call) at the 12 information
states, `eval/KuhnPokerSingle-v0/p_bet_t1/*`), its exact exploitability, and for every
state the exploitability left if that state alone were set to its best probability (the
other 11 as played; a grid of 101 values). The state whose mending lowers exploitability
most is where the run's error sits. Also how far each run plays a card alike in the two
seats (the mean absolute difference between a card's first-mover and second-mover
probabilities at the two matching decisions), and the least exploitable policy that plays
each card exactly alike in both seats (Nelder-Mead from 12 random starts). Writes
OUT_DIR/strategies.md and OUT_DIR/strategies.jsonl.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from spiral.analysis.exploitability import kuhn_exploitability
from spiral.analysis.iterate_average import logged_tables, table_policy
from spiral.report.sinks import read_jsonl

STATES = ("J", "Q", "K", "Jp", "Qp", "Kp", "Jb", "Qb", "Kb", "Jpb", "Qpb", "Kpb")
GRID = [i / 100 for i in range(101)]
# A card's first-mover and second-mover probabilities at matching decisions.
PAIRS = (("J", "Jp"), ("Q", "Qp"), ("K", "Kp"), ("Jpb", "Jb"), ("Qpb", "Qb"), ("Kpb", "Kb"))


def exploitability(table: dict[str, float]) -> float:
    return kuhn_exploitability(table_policy(table))["exploitability"]


def mended(table: dict[str, float], state: str) -> tuple[float, float]:
    """(best probability at `state`, exploitability with it), the rest as played."""
    return min(((p, exploitability({**table, state: p})) for p in GRID), key=lambda x: x[1])


def seat_gap(table: dict[str, float]) -> float:
    return sum(abs(table[a] - table[b]) for a, b in PAIRS) / len(PAIRS)


def tied_optimum() -> tuple[float, dict[str, float]]:
    """The least exploitable policy whose play of each card is the same in both seats."""
    import numpy as np
    from scipy.optimize import minimize

    def table(x: np.ndarray) -> dict[str, float]:
        x = np.clip(x, 0.0, 1.0)
        return {s: float(x[i]) for i, pair in enumerate(PAIRS) for s in pair}

    rng = np.random.default_rng(0)
    fits = [
        minimize(
            lambda x: exploitability(table(x)),
            rng.uniform(0, 1, len(PAIRS)),
            method="Nelder-Mead",
            options={"maxiter": 600, "xatol": 1e-4},
        )
        for _ in range(12)
    ]
    best = min(fits, key=lambda f: f.fun)
    return float(best.fun), table(best.x)


def main() -> None:
    out, files = Path(sys.argv[1]), sys.argv[2:]
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for name in files:
        tables = logged_tables(read_jsonl(Path(name)))
        step, table = tables[-1]
        report = kuhn_exploitability(table_policy(table))
        fixes = {s: mended(table, s) for s in STATES}
        worst = min(STATES, key=lambda s: fixes[s][1])
        runs.append({"run": name, "step": step, "table": table, "report": report,
                     "mended": fixes, "worst_state": worst, "seat_gaps": {t: seat_gap(x) for t, x in tables}})  # fmt: skip
    head = " | ".join(STATES)
    lines = [
        "P(bet or call) at each information state (first to act: J, Q, K; after a check: "
        "Jp...; facing a bet: Jb... as second mover, Jpb... as first), exact "
        "exploitability, a best responder's chips against the policy as first mover (the "
        "responder second) and as second mover, and the one state "
        "whose mending lowers exploitability most (to what, with which probability).",
        "",
        f"| run | step | {head} | exploitability | BR vs first / second mover | mend one state | "
        "seat gap |",
        "|---|---|" + "---|" * len(STATES) + "---|---|---|---|",
    ]
    for r in runs:
        cells = " | ".join(f"{r['table'][s]:.2f}" for s in STATES)
        rep, s = r["report"], r["worst_state"]
        p, e = r["mended"][s]
        lines.append(
            f"| {r['run']} | {r['step']} | {cells} | {rep['exploitability']:.3f} | "
            f"{rep['br_value_seat1']:.3f} / {rep['br_value_seat0']:.3f} | "
            f"{s} -> {p:.2f}: {e:.3f} | {r['seat_gaps'][r['step']]:.3f} |"
        )
    gaps = [(t, g) for r in runs for t, g in r["seat_gaps"].items()]
    start = [g for t, g in gaps if t == 0]
    later = [g for t, g in gaps if t > 0]
    if start and later:
        lines += ["", f"Seat gap at step 0: {min(start):.3f}-{max(start):.3f}; at every later "
                  f"evaluation: {min(later):.3f}-{max(later):.3f}."]  # fmt: skip
    best, table = tied_optimum()
    shown = ", ".join(f"{a}/{b} {table[a]:.3f}" for a, b in PAIRS)
    lines += ["", f"Least exploitable policy with each card played alike in both seats: "
              f"{best:.4f} ({shown})."]  # fmt: skip
    (out / "strategies.md").write_text("\n".join(lines) + "\n")
    with (out / "strategies.jsonl").open("w") as f:
        for r in runs:
            f.write(json.dumps(r) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
