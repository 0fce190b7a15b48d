"""The fictitious-play average of a population: hand-worked Kuhn rows, Kuhn's theorem,
fictitious play's convergence, and agreement with OpenSpiel's own aggregators."""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pyspiel", reason="needs the openspiel extra")

import pyspiel  # noqa: E402
from open_spiel.python import policy as os_policy  # noqa: E402
from open_spiel.python.algorithms import (  # noqa: E402
    expected_game_score,
    fictitious_play,
    policy_aggregator,
)
from open_spiel.python.algorithms import exploitability as os_exploitability  # noqa: E402

from spiral.analysis.average_policy import average_policy, average_policy_report  # noqa: E402
from spiral.analysis.exploitability import (  # noqa: E402
    kuhn_moves,
    kuhn_nash_policy,
    kuhn_tabular_policy,
    kuhn_uniform_policy,
    policy_report,
    tabular_policy,
)
from spiral.types import Seat  # noqa: E402

REPORT_KEYS = {
    "nash_conv",
    "exploitability",
    "value_selfplay_seat0",
    "value_selfplay_seat1",
    "br_value_seat0",
    "br_value_seat1",
}


def _kuhn_with(aggressive: dict[str, float]) -> Any:
    """A Kuhn table: P(bet or call) from `aggressive` where given, 1/2 elsewhere."""

    def policy_fn(info_state: str, seat: Seat) -> dict[str, float]:
        p = aggressive.get(info_state, 0.5)
        passive_move, aggressive_move = kuhn_moves(info_state)
        return {passive_move: 1.0 - p, aggressive_move: p}

    return kuhn_tabular_policy(policy_fn)


def _p_bet(table: Any, info_state: str) -> float:
    return float(table.policy_for_key(info_state)[1])  # OpenSpiel action 1: bet / call


def _random_table(game_name: str, rng: np.random.Generator, pure_share: float = 0.3) -> Any:
    """Random rows over the legal actions; about `pure_share` of them deterministic, so
    that some information states go unreached by some members."""
    table = os_policy.TabularPolicy(pyspiel.load_game(game_name))
    mask = table.legal_actions_mask.astype(bool)
    for row, legal in zip(table.action_probability_array, mask, strict=True):
        actions = np.flatnonzero(legal)
        row[:] = 0.0
        if rng.random() < pure_share:
            row[rng.choice(actions)] = 1.0
        else:
            row[actions] = rng.dirichlet(np.ones(len(actions)))
    return table


def _value(game_name: str, seat0: Any, seat1: Any) -> np.ndarray:
    game = pyspiel.load_game(game_name)
    return np.asarray(expected_game_score.policy_value(game.new_initial_state(), [seat0, seat1]))


# ---- 1. hand-worked Kuhn rows ---------------------------------------------------------


def test_kuhn_hand_worked_pure_members() -> None:
    # Holding J ("0"), A always bets and B always checks; after check-bet ("0pb") A would
    # call and B folds. Everything else: 1/2.
    a = _kuhn_with({"0": 1.0, "0pb": 1.0})
    b = _kuhn_with({"0": 0.0, "0pb": 0.0})
    avg = average_policy("kuhn_poker", [a, b])
    # "0": both members reach it (own reach 1 each): (1/2 * 1 * 1 + 1/2 * 1 * 0) / 1 = 1/2.
    assert _p_bet(avg, "0") == pytest.approx(0.5, abs=1e-12)
    # "0pb": A never checks, so own reach r_A = 0, r_B = 1:
    # (1/2 * 0 * 1 + 1/2 * 1 * 0) / (1/2 * 0 + 1/2 * 1) = 0, B's row, not the naive 1/2.
    assert _p_bet(avg, "0pb") == pytest.approx(0.0, abs=1e-12)
    # States where the members agree stay at 1/2, for both seats.
    for key in ("1", "1pb", "2", "2pb", "0p", "0b", "1p", "1b", "2p", "2b"):
        assert _p_bet(avg, key) == pytest.approx(0.5, abs=1e-12), key
    # Weights 3:1 towards A: "0" bets 3/4; "0pb" is still reached by B only, so 0.
    weighted = average_policy("kuhn_poker", [a, b], weights=[3.0, 1.0])
    assert _p_bet(weighted, "0") == pytest.approx(0.75, abs=1e-12)
    assert _p_bet(weighted, "0pb") == pytest.approx(0.0, abs=1e-12)


def test_kuhn_hand_worked_mixed_members() -> None:
    # A bets J with 1/4 (checks 3/4) and then calls; B bets J with 1/2 and then folds.
    a = _kuhn_with({"0": 0.25, "0pb": 1.0})
    b = _kuhn_with({"0": 0.5, "0pb": 0.0})
    avg = average_policy("kuhn_poker", [a, b])
    # "0": (0.25 + 0.5) / 2 = 0.375.
    assert _p_bet(avg, "0") == pytest.approx(0.375, abs=1e-12)
    # "0pb": r_A = 0.75, r_B = 0.5: (0.75 * 1 + 0.5 * 0) / (0.75 + 0.5) = 0.6.
    assert _p_bet(avg, "0pb") == pytest.approx(0.6, abs=1e-12)
    # Weights 1:3: (1 * 0.75) / (1 * 0.75 + 3 * 0.5) = 1/3.
    assert _p_bet(average_policy("kuhn_poker", [a, b], [1.0, 3.0]), "0pb") == pytest.approx(
        1 / 3, abs=1e-12
    )


def test_unreached_state_gets_the_weighted_mean() -> None:
    # Both members always bet J, so neither reaches "0pb": the row is the plain w-mean.
    a = _kuhn_with({"0": 1.0, "0pb": 1.0})
    b = _kuhn_with({"0": 1.0, "0pb": 0.0})
    avg = average_policy("kuhn_poker", [a, b], weights=[1.0, 4.0])
    assert _p_bet(avg, "0pb") == pytest.approx(0.2, abs=1e-12)
    assert _p_bet(avg, "0") == pytest.approx(1.0, abs=1e-12)


def test_inputs_are_left_unchanged() -> None:
    a = _kuhn_with({"0": 1.0, "0pb": 1.0})
    b = _kuhn_with({"0": 0.0, "0pb": 0.0})
    before = [a.action_probability_array.copy(), b.action_probability_array.copy()]
    avg = average_policy("kuhn_poker", [a, b])
    avg.action_probability_array[:] = 0.0
    np.testing.assert_array_equal(a.action_probability_array, before[0])
    np.testing.assert_array_equal(b.action_probability_array, before[1])


# ---- 2. Kuhn's theorem: the average plays like the mixture ---------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_average_value_is_weighted_member_value_kuhn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    members = [_random_table("kuhn_poker", rng) for _ in range(4)]
    weights = rng.random(4) + 0.05
    w = weights / weights.sum()
    avg = average_policy("kuhn_poker", members, weights.tolist())
    nash = kuhn_tabular_policy(kuhn_nash_policy(1 / 6))
    # Seat 0 played by the population against Nash in seat 1, and the other way round.
    expected0 = sum(wk * _value("kuhn_poker", m, nash)[0] for wk, m in zip(w, members, strict=True))
    expected1 = sum(wk * _value("kuhn_poker", nash, m)[1] for wk, m in zip(w, members, strict=True))
    assert _value("kuhn_poker", avg, nash)[0] == pytest.approx(expected0, abs=1e-9)
    assert _value("kuhn_poker", nash, avg)[1] == pytest.approx(expected1, abs=1e-9)
    # The naive per-state mean does not have this property for these members.
    naive = copy.copy(avg)
    naive.action_probability_array = np.einsum(
        "k,ksa->sa", w, np.stack([m.action_probability_array for m in members])
    )
    assert abs(_value("kuhn_poker", naive, nash)[0] - expected0) > 1e-6


def test_average_value_is_weighted_member_value_leduc() -> None:
    rng = np.random.default_rng(7)
    members = [_random_table("leduc_poker", rng) for _ in range(2)]
    opponent = _random_table("leduc_poker", rng, pure_share=0.0)
    avg = average_policy("leduc_poker", members, [0.3, 0.7])
    expected0 = (
        0.3 * _value("leduc_poker", members[0], opponent)[0]
        + 0.7 * (_value("leduc_poker", members[1], opponent)[0])
    )
    expected1 = (
        0.3 * _value("leduc_poker", opponent, members[0])[1]
        + 0.7 * (_value("leduc_poker", opponent, members[1])[1])
    )
    assert _value("leduc_poker", avg, opponent)[0] == pytest.approx(expected0, abs=1e-9)
    assert _value("leduc_poker", opponent, avg)[1] == pytest.approx(expected1, abs=1e-9)


# ---- 3. identical members ------------------------------------------------------------


def test_average_of_identical_members_is_that_member() -> None:
    member = _random_table("kuhn_poker", np.random.default_rng(3))
    avg = average_policy("kuhn_poker", [member, member, member], weights=[0.5, 0.2, 0.3])
    np.testing.assert_allclose(avg.action_probability_array, member.action_probability_array)
    ours = average_policy_report("kuhn_poker", [member, member, member])
    theirs = policy_report("kuhn_poker", member)
    assert ours.keys() == REPORT_KEYS
    for key in REPORT_KEYS:
        assert ours[key] == pytest.approx(theirs[key], abs=1e-12), key


# ---- 4. fictitious play: the average converges, the last iterate does not -------------


def _best_response_table(game: Any, template: Any, against: Any) -> Any:
    """Both seats' exact (pure) best responses to `against`, as one TabularPolicy."""
    table = copy.copy(template)
    for seat in range(game.num_players()):
        actions = os_exploitability.best_response(game, against, seat)["best_response_action"]
        for key in template.states_per_player[seat]:
            row = table.policy_for_key(key)
            row[:] = 0.0
            row[actions[key]] = 1.0
    return table


def test_fictitious_play_average_beats_last_iterate_on_kuhn() -> None:
    game = pyspiel.load_game("kuhn_poker")
    iterates = [kuhn_tabular_policy(kuhn_uniform_policy)]
    for _ in range(50):
        iterates.append(
            _best_response_table(game, iterates[0], average_policy("kuhn_poker", iterates))
        )
    last = policy_report("kuhn_poker", iterates[-1])["exploitability"]
    avg = average_policy_report("kuhn_poker", iterates)["exploitability"]
    # Observed: last iterate 1/3 (a pure strategy), average ~0.036; uniform is 11/24.
    assert avg < 0.1
    assert avg < last / 2
    assert avg < policy_report("kuhn_poker", iterates[0])["exploitability"] / 5


def test_matches_openspiel_xfp_average_on_its_own_iterates() -> None:
    # XFPSolver keeps the uniform start and every best response when save_oracles=True;
    # its average after n iterations is the equal-weight average of those n + 1.
    game = pyspiel.load_game("kuhn_poker")
    solver = fictitious_play.XFPSolver(game, save_oracles=True)
    for _ in range(12):
        solver.iteration()
    template = os_policy.TabularPolicy(game)
    iterates = []
    for n in range(13):
        table = copy.copy(template)
        for seat in range(2):
            oracle = solver._oracles[seat][n]
            for key in template.states_per_player[seat]:
                row = table.policy_for_key(key)
                for action, prob in oracle(template.states[template.state_lookup[key]]):
                    row[action] = prob
        iterates.append(table)
    avg = average_policy("kuhn_poker", iterates)
    for seat, rows in enumerate(solver.average_policy_tables()):
        assert set(rows) == set(template.states_per_player[seat])
        for key, probs in rows.items():
            for action, prob in probs.items():
                assert avg.policy_for_key(key)[action] == pytest.approx(prob, abs=1e-12), key


def test_matches_openspiel_policy_aggregator_where_reached() -> None:
    rng = np.random.default_rng(11)
    members = [_random_table("kuhn_poker", rng, pure_share=0.0) for _ in range(3)]
    weights = [0.2, 0.3, 0.5]
    game = pyspiel.load_game("kuhn_poker")
    theirs = policy_aggregator.PolicyAggregator(game).aggregate(
        [0, 1], [members, members], [weights, weights]
    )
    ours = average_policy("kuhn_poker", members, weights)
    for seat in range(2):
        for key, probs in theirs.policy[seat].items():
            for action, prob in probs.items():
                assert ours.policy_for_key(key)[action] == pytest.approx(prob, abs=1e-12)


# ---- 5. Leduc ------------------------------------------------------------------------


def _leduc_uniform(info_state: str, seat: Seat, legal: list[str]) -> dict[str, float]:
    return dict.fromkeys(legal, 1.0 / len(legal))


def test_leduc_pool() -> None:
    uniform = tabular_policy("leduc_poker", _leduc_uniform)
    other = _random_table("leduc_poker", np.random.default_rng(5))
    report = average_policy_report("leduc_poker", [uniform, other])
    assert report.keys() == REPORT_KEYS
    assert all(math.isfinite(v) for v in report.values())
    assert report["nash_conv"] >= 0.0
    assert report["exploitability"] == pytest.approx(report["nash_conv"] / 2)

    same = average_policy("leduc_poker", [uniform, uniform])
    np.testing.assert_allclose(same.action_probability_array, uniform.action_probability_array)
    assert average_policy_report("leduc_poker", [uniform, uniform])[
        "exploitability"
    ] == pytest.approx(policy_report("leduc_poker", uniform)["exploitability"], abs=1e-12)


# ---- 6. bad input --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ([1.0], "2 policies"),
        ([1.0, 1.0, 1.0], "3 weights for 2 policies"),
        ([1.0, -0.5], "non-negative"),
        ([0.0, 0.0], "positive sum"),
        ([1.0, float("nan")], "finite"),
    ],
)
def test_bad_weights(weights: Sequence[float], message: str) -> None:
    a = kuhn_tabular_policy(kuhn_uniform_policy)
    with pytest.raises(ValueError, match=message):
        average_policy("kuhn_poker", [a, a], weights)


def test_bad_tables() -> None:
    kuhn = kuhn_tabular_policy(kuhn_uniform_policy)
    with pytest.raises(ValueError, match="at least one"):
        average_policy("kuhn_poker", [])
    with pytest.raises(ValueError, match="same game"):
        average_policy("leduc_poker", [kuhn])
    one_seat = os_policy.TabularPolicy(pyspiel.load_game("kuhn_poker"), players=[0])
    with pytest.raises(ValueError, match="both seats"):
        average_policy("kuhn_poker", [kuhn, one_seat])
    broken = copy.copy(kuhn)
    broken.policy_for_key("1pb")[:] = [0.7, 0.7]
    with pytest.raises(ValueError, match=r"policy 1: row '1pb' is not a distribution"):
        average_policy("kuhn_poker", [kuhn, broken])
    with pytest.raises(ValueError, match="two-player"):
        average_policy("goofspiel", [kuhn])
