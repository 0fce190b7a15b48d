"""The full-width tree and its exact values, against numbers worked by hand."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spiral import games
from spiral.algo.full_width import TreeTooLarge, count_decisions, exact_values, expand
from spiral.games.base import State

KUHN = "KuhnPokerSingle-v0"


def _deals(game_id: str) -> list[State]:
    return [games.make(game_id, seed=0, **o) for o in games.chance_outcomes(game_id) or ({},)]


def _kuhn_key(state: State, seat: int) -> tuple[int, str]:
    return state.private_info(seat)[0], state.history_string()  # type: ignore[attr-defined, return-value]


def _uniform(tree) -> dict:
    return {k: [1 / len(m)] * len(m) for k, m in zip(tree.keys, tree.moves, strict=True)}


def test_kuhn_tree_is_the_twelve_information_states() -> None:
    tree = expand(_deals(KUHN), _kuhn_key, 1000)
    assert tree.num_decisions == 24  # 6 deals x (opener, responder, opener after check-bet)
    assert len(set(tree.keys)) == 12
    assert len(tree.roots) == 6 and len(tree.returns) == 30  # 5 endings x 6 deals


def test_kuhn_uniform_values_worked_by_hand() -> None:
    """Uniform play, the opener holding J (key (0, "")): reached in 1 deal of 3.
    Betting: the responder (Q or K) calls half the time (-2) and folds half (+1): -0.5.
    Checking: the responder checks half (showdown -1) or bets half, when J folds half
    (-1) and calls half (-2): 0.5 x -1 + 0.5 x (0.5 x -1 + 0.5 x -2) = -1.25.
    The responder holding K facing a bet (key (2, "b")): the opener (J or Q) bet with
    probability 1/2, so reach = 1/3 x 1/2; fold -1, call +2."""
    tree = expand(_deals(KUHN), _kuhn_key, 1000)
    values, root = exact_values(tree, _uniform(tree))
    opener_j = values[(0, "")]
    assert opener_j.seat == 0 and opener_j.moves == ("[check]", "[bet]")
    assert opener_j.reach == pytest.approx(1 / 3)
    assert opener_j.q == pytest.approx((-1.25, -0.5))
    assert opener_j.value([0.5, 0.5]) == pytest.approx(-0.875)
    k_facing = values[(2, "b")]
    assert k_facing.seat == 1 and k_facing.reach == pytest.approx(1 / 6)
    assert k_facing.q == pytest.approx((-1.0, 2.0))
    # Zero-sum at the root; a game has 2 decisions, plus a third after check-bet (1/4).
    assert root[0] == pytest.approx(-root[1])
    assert math.fsum(v.reach for v in values.values()) == pytest.approx(2.25)


def test_a_pure_policy_reaches_only_its_own_line() -> None:
    """Everyone always bets or calls: the opener's check is never played, so the
    responder's decisions after a check are never reached, and every hand is a called
    bet worth 2 chips to the higher card."""
    tree = expand(_deals(KUHN), _kuhn_key, 1000)
    always = {k: [0.0, 1.0] for k in tree.keys}
    values, root = exact_values(tree, always)
    assert values[(1, "p")].reach == 0.0 and values[(1, "b")].reach == pytest.approx(1 / 3)
    assert values[(2, "")].q[1] == pytest.approx(2.0)  # K's bet is always called and wins
    assert values[(1, "")].q[1] == pytest.approx(0.0)  # Q wins against J, loses against K
    assert root == pytest.approx((0.0, 0.0))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_exact_values_agree_with_play(seed: int) -> None:
    """Under any policy, each seat's root value is the mean return of every deal played
    out move by move with the policy's probabilities (an independent walk)."""
    rng = random.Random(seed)
    tree = expand(_deals(KUHN), _kuhn_key, 1000)
    policy = {}
    for k in tree.keys:
        p = rng.random()
        policy[k] = [p, 1 - p]
    _, root = exact_values(tree, policy)

    def walk(state: State) -> tuple[float, float]:
        if state.is_terminal():
            r = state.returns()
            return float(r[0]), float(r[1])
        probs = policy[_kuhn_key(state, state.current_player())]
        total = [0.0, 0.0]
        for p, move in zip(probs, state.legal_actions(), strict=True):
            child = state.clone()
            child.apply_action(move)
            v = walk(child)
            total = [total[0] + p * v[0], total[1] + p * v[1]]
        return total[0], total[1]

    deals = _deals(KUHN)
    expected = [sum(walk(d)[s] for d in deals) / len(deals) for s in (0, 1)]
    assert root == pytest.approx(tuple(expected), abs=1e-12)


def test_leduc_tree_size() -> None:
    deals = _deals("LeducPoker-v0")
    assert len(deals) == 120
    assert count_decisions(deals, 20_000) == 4320


def test_a_tree_above_the_bound_is_refused_with_its_size() -> None:
    deals = _deals("TicTacToe-v0")  # no chance: one deal
    assert len(deals) == 1
    with pytest.raises(TreeTooLarge, match=r"TicTacToe-v0 has more than 1,000 decisions"):
        count_decisions(deals, 1000)
    count = iter(range(10**9))
    with pytest.raises(TreeTooLarge, match="1,000"):
        expand(deals, lambda s, seat: next(count), 1000)


def test_a_key_with_two_sets_of_legal_moves_is_refused() -> None:
    """A key that merges the opener's first decision with a decision facing a bet: the
    policy's answer there could not be one distribution."""
    with pytest.raises(ValueError, match="different legal moves"):
        expand(_deals(KUHN), lambda s, seat: seat, 1000)


def test_policy_with_the_wrong_number_of_moves_is_refused() -> None:
    tree = expand(_deals(KUHN), _kuhn_key, 1000)
    bad = _uniform(tree)
    bad[(0, "")] = [1.0]
    with pytest.raises(ValueError, match="1 probabilities"):
        exact_values(tree, bad)
