"""How exploitable a Kuhn policy must be when every move keeps at least p_min: the bias a
move floor (`move_floor=p_min`) sets under the exact exploitability a run can reach.

    python benchmarks/kuhn_floor_bound.py [OUT_DIR]

For each p_min: the best of the equilibrium family (alpha in [0, 1/3]) with every move's
probability clipped into [p_min, 1 - p_min], and the lowest exploitability a derivative-free
search (Powell, started from four members of the family: alpha 0, 1/9, 2/9, 1/3) finds over all such policies; the
search gives an upper bound on the true minimum. Exact numbers through OpenSpiel; seconds
on one core. Writes OUT_DIR/bound.json when OUT_DIR is given.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

from spiral.analysis.exploitability import (
    KuhnPolicyFn,
    kuhn_exploitability,
    kuhn_info_states,
    kuhn_moves,
    kuhn_nash_policy,
)

FLOORS = (0.02, 0.05, 0.1, 0.2)
ALPHAS = np.linspace(0.0, 1.0 / 3.0, 25)  # the clipped family
STARTS = ALPHAS[::8]  # where the search starts: alpha 0, 1/9, 2/9, 1/3
STATES = [info for info, _, _ in kuhn_info_states()]


def exploitability(p_bet: dict[str, float]) -> float:
    def policy(info_state: str, seat: int) -> dict[str, float]:
        passive, aggressive = kuhn_moves(info_state)
        return {passive: 1.0 - p_bet[info_state], aggressive: p_bet[info_state]}

    return kuhn_exploitability(policy)["exploitability"]


def nash_bets(alpha: float) -> np.ndarray:
    nash: KuhnPolicyFn = kuhn_nash_policy(alpha)
    return np.array([nash(s, 0)[kuhn_moves(s)[1]] for s in STATES])


def bound(p_min: float) -> dict[str, float]:
    """Clipped equilibrium and searched minimum with every move in [p_min, 1 - p_min]."""

    def squashed(x: np.ndarray) -> dict[str, float]:
        return dict(zip(STATES, p_min + (1 - 2 * p_min) / (1 + np.exp(-x)), strict=True))

    def clip(alpha: float) -> np.ndarray:
        return np.clip(nash_bets(alpha), p_min, 1 - p_min)

    clipped = min(exploitability(dict(zip(STATES, clip(a), strict=True))) for a in ALPHAS)
    searched = 1.0
    for alpha in STARTS:
        p = clip(alpha)
        inner = np.clip(p, p_min + 1e-3, 1 - p_min - 1e-3)
        x0 = np.log((inner - p_min) / (1 - p_min - inner))
        found = minimize(
            lambda x: exploitability(squashed(x)),
            x0,
            method="Powell",
            options={"maxfev": 3000, "xtol": 1e-4},
        )
        searched = min(searched, float(found.fun))
    return {"p_min": p_min, "clipped_equilibrium": clipped, "searched": searched}


def main(out: Path | None) -> None:
    rows = [bound(p) for p in FLOORS]
    print("| p_min | equilibrium clipped | lowest found |\n|---|---|---|")
    for r in rows:
        print(f"| {r['p_min']:g} | {r['clipped_equilibrium']:.3f} | {r['searched']:.3f} |")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "bound.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
