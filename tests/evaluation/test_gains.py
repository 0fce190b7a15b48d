"""Where a best responder gains (`analysis/gains.py`): the gains at a seat's information
states are never negative and add up, seat by seat, to OpenSpiel's best-response
improvement, for any policy; a Nash policy leaves nothing to gain; a mistake planted in
Leduc's second round shows up as a larger second-round gain."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spiral.analysis.gains import best_response_gains

pyspiel = pytest.importorskip("pyspiel")
from open_spiel.python import policy as os_policy  # noqa: E402
from open_spiel.python.algorithms import exploitability as os_exploitability  # noqa: E402


def _random_table(game: object, seed: int) -> os_policy.TabularPolicy:
    table = os_policy.TabularPolicy(game)
    rng = np.random.default_rng(seed)
    for index, state in enumerate(table.states):
        row = table.action_probability_array[index]
        row[:] = 0.0
        legal = state.legal_actions()
        weights = rng.dirichlet(np.ones(len(legal))) * (rng.random(len(legal)) > 0.3)
        weights = weights if weights.sum() > 0 else np.eye(len(legal))[rng.integers(len(legal))]
        row[legal] = weights / weights.sum()
    return table


def _card(info: str) -> str:
    return info[0]


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_kuhn_gains_add_up_to_each_seats_improvement(seed: int) -> None:
    game = pyspiel.load_game("kuhn_poker")
    table = _random_table(game, seed)
    gains = best_response_gains(game, table, _card)
    improvements = os_exploitability.nash_conv(
        game, table, return_only_nash_conv=False
    ).player_improvements
    for seat in (0, 1):
        assert min(gains[seat].values()) >= -1e-12
        assert sum(gains[seat].values()) == pytest.approx(improvements[seat], abs=1e-9)


def test_a_nash_policy_leaves_nothing_to_gain() -> None:
    game = pyspiel.load_game("kuhn_poker")
    alpha = 1 / 3  # Kuhn's Nash family: P(bet with J first) = alpha
    nash = {
        "0": [1 - alpha, alpha], "1": [1.0, 0.0], "2": [1 - 3 * alpha, 3 * alpha],
        "0pb": [1.0, 0.0], "1pb": [2 / 3 - alpha, 1 / 3 + alpha], "2pb": [0.0, 1.0],
        "0p": [2 / 3, 1 / 3], "1p": [1.0, 0.0], "2p": [0.0, 1.0],
        "0b": [1.0, 0.0], "1b": [2 / 3, 1 / 3], "2b": [0.0, 1.0],
    }  # fmt: skip
    table = os_policy.TabularPolicy(game)
    for key, probs in nash.items():
        table.policy_for_key(key)[:] = probs
    gains = best_response_gains(game, table, _card)
    assert all(abs(g) < 1e-12 for seat in gains.values() for g in seat.values())


def test_leduc_gains_by_round_add_up_and_find_a_second_round_mistake() -> None:
    """From a CFR policy, seat 1 made to fold every second-round bet: the best responder
    in seat 0 gains more in round 2 (it bets into the folds), and each seat's rounds add
    up to its improvement, before and after."""
    from open_spiel.python.algorithms import cfr

    game = pyspiel.load_game("leduc_poker")
    solver = cfr.CFRSolver(game)
    for _ in range(30):
        solver.evaluate_and_update_policy()
    base = solver.average_policy()
    erring = os_policy.TabularPolicy(game)
    for index, state in enumerate(erring.states):
        row = erring.action_probability_array[index]
        row[:] = 0.0
        for action, p in base.action_probabilities(state).items():
            row[action] = p
        second_round = "[Round 2]" in state.information_state_string()
        if state.current_player() == 1 and second_round and 0 in state.legal_actions():
            row[:] = 0.0
            row[0] = 1.0  # fold (legal only facing a bet)

    def betting_round(info: str) -> str:
        return "2" if "[Round 2]" in info else "1"

    before = best_response_gains(game, base, betting_round)
    after = best_response_gains(game, erring, betting_round)
    assert after[0]["2"] > before[0]["2"] + 0.05
    for policy, gains in ((base, before), (erring, after)):
        improvements = os_exploitability.nash_conv(
            game, policy, return_only_nash_conv=False
        ).player_improvements
        for seat in (0, 1):
            assert min(gains[seat].values()) >= -1e-12
            assert sum(gains[seat].values()) == pytest.approx(improvements[seat], abs=1e-9)
