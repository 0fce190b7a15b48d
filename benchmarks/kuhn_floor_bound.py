"""How exploitable a Kuhn policy must be when every move keeps at least p_min: the bias a
move floor (`move_floor=p_min`) sets under the exact exploitability a run can reach.

    python benchmarks/kuhn_floor_bound.py [OUT_DIR]

Exploitability is half of NashConv, and NashConv is the sum of two best-response values,
one against each seat's strategy, so the least exploitability over floored policies is
half the sum of two minima, one per seat. Each is a linear program: a seat's strategy in
sequence form (realisation weights, so "every move at least p_min" is linear: a move's
weight >= p_min times its situation's), and the opponent's best response as one variable
per situation bounded below by each move's value. The optimum is exact (scipy's HiGHS),
and the policy it returns is checked against `kuhn_exploitability` (OpenSpiel's
computation). Beside it, the best of the equilibrium family (alpha in [0, 1/3]) with every
probability clipped into [p_min, 1 - p_min]. Seconds on one core; writes
OUT_DIR/bound.json when OUT_DIR is given.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import linprog

from spiral.analysis.exploitability import kuhn_exploitability, kuhn_moves, kuhn_nash_policy

FLOORS = (0.02, 0.05, 0.1, 0.2)
ALPHAS = np.linspace(0.0, 1.0 / 3.0, 25)
CARDS = (0, 1, 2)
DEAL = 1.0 / 6.0  # each ordered pair of different cards


def _win(mine: int, theirs: int) -> float:
    return 1.0 if mine > theirs else -1.0


class _Program:
    """min c.x subject to rows of `A x <= b` and `A x == b`, built a row at a time."""

    def __init__(self, size: int, objective: list[int]) -> None:
        self.size, self.objective = size, objective
        self.upper: list[tuple[np.ndarray, float]] = []
        self.equal: list[tuple[np.ndarray, float]] = []

    def row(self, terms: dict[int, float]) -> np.ndarray:
        out = np.zeros(self.size)
        for index, weight in terms.items():
            out[index] += weight
        return out

    def solve(self, bounds: list[tuple[float | None, float | None]]) -> tuple[float, np.ndarray]:
        cost = self.row({i: 1.0 for i in self.objective})
        a_eq = np.array([r for r, _ in self.equal]) if self.equal else None
        found = linprog(
            cost,
            A_ub=np.array([r for r, _ in self.upper]),
            b_ub=[b for _, b in self.upper],
            A_eq=a_eq,
            b_eq=[b for _, b in self.equal] if self.equal else None,
            bounds=bounds,
            method="highs",
        )
        if not found.success:
            raise RuntimeError(f"the linear program failed: {found.message}")
        return float(found.fun), found.x


def first_seat(p_min: float) -> tuple[float, dict[str, float]]:
    """The least best-response value the second seat gets against a floored first seat,
    and that first seat's bet/call probabilities. Per card c the weights of bet, check,
    check-then-call and check-then-fold (4c .. 4c+3), then one value per second-seat
    situation (12 + d facing a check, 15 + d facing a bet)."""
    lp = _Program(18, list(range(12, 18)))
    for c in CARDS:
        bet, check, call, fold = 4 * c, 4 * c + 1, 4 * c + 2, 4 * c + 3
        lp.equal += [
            (lp.row({bet: 1, check: 1}), 1.0),
            (lp.row({call: 1, fold: 1, check: -1}), 0.0),
        ]
        lp.upper += [(lp.row({bet: -1}), -p_min), (lp.row({check: -1}), -p_min)]
        lp.upper += [(lp.row({move: -1, check: p_min}), 0.0) for move in (call, fold)]
    for d in CARDS:
        others = [c for c in CARDS if c != d]
        after_check = {
            "check": {4 * c + 1: DEAL * _win(d, c) for c in others},
            "bet": {k: v for c in others for k, v in
                    ((4 * c + 3, DEAL), (4 * c + 2, 2 * DEAL * _win(d, c)))},
        }  # fmt: skip
        after_bet = {
            "fold": {4 * c: -DEAL for c in others},
            "call": {4 * c: 2 * DEAL * _win(d, c) for c in others},
        }
        for value, moves in ((12 + d, after_check), (15 + d, after_bet)):
            lp.upper += [(lp.row({**terms, value: -1}), 0.0) for terms in moves.values()]
    low, x = lp.solve([(0.0, None)] * 12 + [(None, None)] * 6)
    bets = {str(c): x[4 * c] for c in CARDS} | {
        f"{c}pb": x[4 * c + 2] / x[4 * c + 1] for c in CARDS
    }
    return low, bets


def second_seat(p_min: float) -> tuple[float, dict[str, float]]:
    """The least best-response value the first seat gets against a floored second seat.
    Variables: per card d the bet probability after a check (d) and the call probability
    (3 + d); per first-seat card c its best value (6 + c) and its best answer to a bet
    after checking (9 + c)."""
    lp = _Program(12, [6, 7, 8])
    for c in CARDS:
        others = [d for d in CARDS if d != c]
        best, answer = 6 + c, 9 + c
        # bet: the second seat folds (+1) or calls (+-2)
        bet = {3 + d: DEAL * (2 * _win(c, d) - 1) for d in others}
        lp.upper.append((lp.row({**bet, best: -1}), -DEAL * len(others)))
        # check: a check back is a showdown for +-1, a bet is answered by `answer`
        check = {d: -DEAL * _win(c, d) for d in others}
        showdown = sum(DEAL * _win(c, d) for d in others)
        lp.upper.append((lp.row({**check, answer: 1, best: -1}), -showdown))
        for reply in ({d: -DEAL for d in others}, {d: 2 * DEAL * _win(c, d) for d in others}):
            lp.upper.append((lp.row({**reply, answer: -1}), 0.0))
    low, x = lp.solve([(p_min, 1 - p_min)] * 6 + [(None, None)] * 6)
    return low, {f"{d}p": x[d] for d in CARDS} | {f"{d}b": x[3 + d] for d in CARDS}


def as_policy(bets: dict[str, float]):  # noqa: ANN201 (a KuhnPolicyFn)
    def policy(info_state: str, seat: int) -> dict[str, float]:
        passive, aggressive = kuhn_moves(info_state)
        return {passive: 1.0 - bets[info_state], aggressive: bets[info_state]}

    return policy


def bound(p_min: float) -> dict[str, float]:
    """The exact least exploitability with every move in [p_min, 1 - p_min], checked
    against OpenSpiel on the policy that attains it, and the clipped equilibrium."""
    low_first, first = first_seat(p_min)
    low_second, second = second_seat(p_min)
    least = (low_first + low_second) / 2
    attained = kuhn_exploitability(as_policy(first | second))["exploitability"]
    if abs(attained - least) > 1e-9:
        raise RuntimeError(f"p_min {p_min}: the program says {least}, its policy {attained}")

    def clipped(alpha: float) -> float:
        nash = kuhn_nash_policy(alpha)
        bets = {s: float(np.clip(nash(s, 0)[kuhn_moves(s)[1]], p_min, 1 - p_min)) for s in first}
        bets |= {s: float(np.clip(nash(s, 1)[kuhn_moves(s)[1]], p_min, 1 - p_min)) for s in second}
        return kuhn_exploitability(as_policy(bets))["exploitability"]

    return {
        "p_min": p_min,
        "clipped_equilibrium": min(clipped(a) for a in ALPHAS),
        "least": least,
        "policy": {s: round(v, 6) for s, v in sorted((first | second).items())},
    }


def main(out: Path | None) -> None:
    rows = [bound(p) for p in FLOORS]
    print("| p_min | equilibrium clipped | least (exact) |\n|---|---|---|")
    for r in rows:
        print(f"| {r['p_min']:g} | {r['clipped_equilibrium']:.4f} | {r['least']:.5f} |")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "bound.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
