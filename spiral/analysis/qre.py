"""Where regularised self-play should end up: the regularised equilibrium of Kuhn poker.

With an entropy bonus `entropy_coef` (alpha) and a KL term `kl_coef` (beta) towards a
magnet mu, the training objective at each decision s of a seat is

    sum_a pi(a|s) Q(s, a) + alpha H(pi(.|s)) - beta KL(pi(.|s) || mu(.|s))

where Q(s, a) is the expected chips after a at s given what the seat knows (its card
and the betting), both seats following pi. Setting the gradient of that to zero at every
decision gives the fixed point (a logit "agent quantal-response equilibrium")

    pi(a|s) proportional to mu(a|s)^(beta / (alpha + beta)) * exp(Q(s, a) / (alpha + beta))

(mu uniform when beta = 0). As alpha + beta -> 0 it approaches a Nash equilibrium; the
coefficients trade exploitability at the fixed point for a policy that stays stochastic
and a last iterate that converges (magnetic mirror descent). `regularized_equilibrium`
finds the fixed point by damped iteration and `kuhn_exploitability` measures it, which is
the number a training run with those coefficients can be compared with.

Tables map an OpenSpiel information state ("0", "1pb", "2b": card digit 0=J 1=Q 2=K,
then the betting in p/b letters) to P(bet or call) there. Pure Python, no OpenSpiel.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from spiral.analysis.exploitability import KUHN_DECISION_HISTORIES

Table = dict[str, float]  # information state -> P(aggressive move: bet or call)
_TERMINAL = ("pp", "pbp", "pbb", "bp", "bb")


def _utility0(c0: int, c1: int, history: str) -> float:
    """Chips won by seat 0 at a terminal history."""
    if history == "pbp":
        return -1.0  # seat 0 folded to a bet
    if history == "bp":
        return 1.0  # seat 1 folded
    stake = 2.0 if history.endswith("bb") else 1.0
    return stake if c0 > c1 else -stake


def _value0(table: Mapping[str, float], c0: int, c1: int, history: str) -> float:
    """Expected chips of seat 0 from `history` on, both seats playing `table`."""
    if history in _TERMINAL:
        return _utility0(c0, c1, history)
    seat = KUHN_DECISION_HISTORIES[history]
    p_bet = table[f"{(c0, c1)[seat]}{history}"]
    return (1.0 - p_bet) * _value0(table, c0, c1, history + "p") + p_bet * _value0(
        table, c0, c1, history + "b"
    )


def _opponent_reach(table: Mapping[str, float], seat: int, card: int, history: str) -> float:
    """Probability that the opponent holding `card` made its moves in `history`."""
    reach = 1.0
    for i, letter in enumerate(history):
        if KUHN_DECISION_HISTORIES[history[:i]] == 1 - seat:
            p_bet = table[f"{card}{history[:i]}"]
            reach *= p_bet if letter == "b" else 1.0 - p_bet
    return reach


def action_values(table: Mapping[str, float]) -> dict[str, tuple[float, float]]:
    """Q(s, pass) and Q(s, bet) in chips for the seat acting at each information state,
    given its card and the betting (opponent cards weighted by their reach)."""
    out: dict[str, tuple[float, float]] = {}
    for history, seat in KUHN_DECISION_HISTORIES.items():
        sign = 1.0 if seat == 0 else -1.0
        for card in range(3):
            weights, q_pass, q_bet = 0.0, 0.0, 0.0
            for other in range(3):
                if other == card:
                    continue
                w = _opponent_reach(table, seat, other, history)
                c0, c1 = (card, other) if seat == 0 else (other, card)
                q_pass += w * sign * _value0(table, c0, c1, history + "p")
                q_bet += w * sign * _value0(table, c0, c1, history + "b")
                weights += w
            if weights <= 0.0:
                raise ValueError(f"information state {card}{history} is never reached")
            out[f"{card}{history}"] = (q_pass / weights, q_bet / weights)
    return out


def _regularised_slope(z: float, dq: float, alpha: float, beta: float, m: float) -> float:
    """d/dp of p Q(bet) + (1 - p) Q(pass) + alpha H(p) - beta KL(pi || magnet) at
    p = sigmoid(z)."""
    slope = dq - alpha * z
    if beta > 0:
        slope -= beta * (z - math.log(m) + math.log(1.0 - m))
    return slope


def _solve_logit(dq: float, alpha: float, beta: float, m: float) -> float:
    """The logit where the regularised slope is 0 (it decreases in z): bisection."""
    lo, hi = -60.0, 60.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _regularised_slope(mid, dq, alpha, beta, m) > 0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _magnet(magnet: Mapping[str, float] | None, info: str) -> float:
    m = 0.5 if magnet is None else magnet[info]
    return min(max(m, 1e-12), 1.0 - 1e-12)


def regularized_response(
    table: Mapping[str, float],
    entropy_coef: float,
    kl_coef: float = 0.0,
    magnet: Mapping[str, float] | None = None,
) -> Table:
    """The regularised best response to `table` at every information state: the P(bet)
    that maximises the regularised objective given the opponent's play in `table`
    (magnet None: uniform; the reverse KL, as `spiral.algo.regularizers`)."""
    if entropy_coef + kl_coef <= 0:
        raise ValueError("need entropy_coef + kl_coef > 0 for a regularised response")
    return {
        info: _sigmoid(_solve_logit(q_bet - q_pass, entropy_coef, kl_coef, _magnet(magnet, info)))
        for info, (q_pass, q_bet) in action_values(table).items()
    }


def regularized_equilibrium(
    entropy_coef: float,
    kl_coef: float = 0.0,
    magnet: Mapping[str, float] | None = None,
    step_size: float = 0.05,
    tolerance: float = 1e-8,
    max_iterations: int = 200_000,
) -> Table:
    """The fixed point pi = regularized_response(pi), found by magnetic mirror descent.

    In logits z (P(bet) = sigmoid(z)) every step moves z by `step_size` times the
    regularised slope (reverse KL and entropy: exactly MMD's update
    z <- (z + eta * (dQ + beta * logit(mu))) / (1 + eta * (alpha + beta))): a mirror-descent
    step whose last iterate converges, where plain damped best-response iteration cycles
    below alpha ~ 0.1. Stops when no probability differs from the regularised response by
    `tolerance` or more; raises if that takes longer than `max_iterations`."""
    if entropy_coef + kl_coef <= 0:
        raise ValueError("need entropy_coef + kl_coef > 0 for a regularised equilibrium")
    temperature = entropy_coef + kl_coef
    logits = {f"{c}{h}": 0.0 for h in KUHN_DECISION_HISTORIES for c in range(3)}
    magnets = {k: _magnet(magnet if kl_coef > 0 else None, k) for k in logits}
    residual = math.inf
    for _ in range(max_iterations):
        table = {k: _sigmoid(z) for k, z in logits.items()}
        q = action_values(table)
        dq = {k: q[k][1] - q[k][0] for k in logits}
        response = {
            k: _sigmoid(
                (dq[k] + kl_coef * (math.log(magnets[k]) - math.log(1 - magnets[k]))) / temperature
            )
            for k in logits
        }
        residual = max(abs(response[k] - table[k]) for k in logits)
        if residual < tolerance:
            return table
        logits = {
            k: (
                z
                + step_size * (dq[k] + kl_coef * (math.log(magnets[k]) - math.log(1 - magnets[k])))
            )
            / (1.0 + step_size * temperature)
            for k, z in logits.items()
        }
    raise RuntimeError(
        f"no regularised equilibrium within {max_iterations} iterations (largest gap to "
        f"the regularised response {residual:.2e}); lower step_size"
    )


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))
