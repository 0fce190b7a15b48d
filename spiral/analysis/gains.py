"""Where a best responder gains against a policy, by its information states.

For the seat that best-responds, `BR value - the policy's own value` splits exactly over
that seat's information states I (the performance-difference identity, with perfect
recall):

    gain(I) = sum over histories h in I of  reach(h) * (q(h, br(I)) - sum_a pi(a|I) q(h, a))

where `reach(h)` is the probability that chance, the opponent and the seat's own policy
lead to h, `q(h, a)` the seat's value after playing a at h and best-responding from
there, and `br(I)` the best response's move at I. Each term is >= 0, so summing gains by
a label of I (a Leduc betting round, a card) shows where the policy is exploitable and by
how much, and the sums add up to each seat's best-response improvement.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any


def best_response_gains(
    game: Any, policy: Any, label: Callable[[str], str]
) -> dict[int, dict[str, float]]:
    """{seat: {label of the seat's information state: gain}} for an OpenSpiel `game` and
    an OpenSpiel `policy` both seats play. Each seat's gains sum to its `br_value -
    value_selfplay` (`exploitability.policy_report`)."""
    from open_spiel.python.algorithms import best_response

    out: dict[int, dict[str, float]] = {}
    for seat in range(game.num_players()):
        br = best_response.BestResponsePolicy(game, seat, policy)
        gains: dict[str, float] = defaultdict(float)
        stack = [(game.new_initial_state(), 1.0)]
        while stack:
            state, reach = stack.pop()
            if state.is_terminal():
                continue
            if state.is_chance_node():
                moves = state.chance_outcomes()
            else:
                moves = list(policy.action_probabilities(state).items())
                if state.current_player() == seat:
                    info = state.information_state_string(seat)
                    q = {a: br.q_value(state, a) for a, _ in moves}
                    own = sum(p * q[a] for a, p in moves)
                    gains[label(info)] += reach * (q[br.best_response_action(info)] - own)
            stack.extend((state.child(a), reach * p) for a, p in moves if p > 0)
        out[seat] = dict(gains)
    return out
