"""LiarsDice-v1: bid ordering, call resolution worked by hand, loser starts, hidden dice."""

from __future__ import annotations

import random

import pytest

from spiral.games import IllegalMoveError, State, make
from spiral.games.liars_dice import CALL, LiarsDiceState, bid_move


def _ld(seed: int = 0, **params: int) -> LiarsDiceState:
    state = make("LiarsDice-v1", seed=seed, **params)
    assert isinstance(state, LiarsDiceState)
    return state


def _play_random(state: State, seed: int) -> None:
    rng = random.Random(seed)
    while not state.is_terminal():
        legal = state.legal_actions()
        assert legal and state.current_player() in (0, 1)
        state.apply_action(rng.choice(legal))


def test_opening_moves_are_all_sixty_bids_and_no_call() -> None:
    state = _ld(0)
    legal = state.legal_actions()
    assert state.current_player() == 0
    assert len(legal) == 10 * 6  # quantities 1..10 (both hands) x faces 1..6
    assert CALL not in legal
    assert legal[0] == "[Bid: 1, 1]" and legal[-1] == "[Bid: 10, 6]"


def test_bids_must_raise_quantity_or_face() -> None:
    state = _ld(0)
    state.apply_action("[Bid: 3, 4]")
    legal = state.legal_actions()
    # Call, same quantity with faces 5 and 6, quantities 4..10 with any face.
    assert len(legal) == 1 + 2 + 7 * 6
    assert {CALL, "[Bid: 3, 5]", "[Bid: 3, 6]", "[Bid: 4, 1]", "[Bid: 10, 6]"} <= set(legal)
    for illegal in (
        "[Bid: 3, 4]",
        "[Bid: 3, 2]",
        "[Bid: 2, 6]",
        "[Bid: 11, 1]",
        "[Bid: 4, 7]",
        "[Bid: 4, 0]",
    ):
        assert state.parse_action(illegal) is None
        with pytest.raises(IllegalMoveError):
            state.apply_action(illegal)
    assert state.current_player() == 1 and state.bid == (3, 4)


def test_call_without_a_bid_is_illegal() -> None:
    state = _ld(0)
    with pytest.raises(IllegalMoveError):
        state.apply_action(CALL)


@pytest.mark.parametrize("text", ["[bid: 3,5]", "[Bid 3, 5]", " [BID:3 5] ", "[ Bid : 3 , 5 ]"])
def test_bid_spellings_are_accepted(text: str) -> None:
    assert _ld(0).parse_action(text) == bid_move(3, 5)


@pytest.mark.parametrize(
    "text",
    [
        "[Bid: 3, 5, 6]",
        "[Bid: three, 5]",
        "Bid: 3, 5",
        "[Bid: 3]",
        "[Bid: 3, 5] [Call]",
        "[call me]",
    ],
)
def test_ambiguous_or_malformed_spellings_are_rejected(text: str) -> None:
    assert _ld(0).parse_action(text) is None


def test_call_on_a_true_bid_costs_the_caller_a_die_and_the_caller_starts() -> None:
    state = _ld(0)
    state.dice = ((1, 2, 2, 3, 5), (2, 2, 4, 6, 6))  # four 2s in play
    state.apply_action("[Bid: 4, 2]")  # seat 0: exactly true
    state.apply_action(CALL)  # seat 1 calls and is wrong
    assert state.remaining == [5, 4]
    assert state.current_player() == 1  # the loser opens the next round
    assert state.bid is None and len(state.dice[1]) == 4 and len(state.dice[0]) == 5
    assert "The actual count of face 2 is 4" in state.observation(0)


def test_call_on_a_bluff_costs_the_bidder_a_die() -> None:
    state = _ld(0)
    state.dice = ((1, 2, 2, 3, 5), (2, 2, 4, 6, 6))
    state.apply_action("[Bid: 5, 2]")  # seat 0 overbids: only four 2s
    state.apply_action(CALL)
    assert state.remaining == [4, 5]
    assert state.current_player() == 0


def test_losing_the_last_die_loses_the_game() -> None:
    state = _ld(0, num_dice=1)
    state.dice = ((1,), (2,))
    state.apply_action("[Bid: 1, 6]")  # a bluff: no 6 at all
    state.apply_action(CALL)
    assert state.is_terminal() and not state.truncated()
    assert state.returns() == (-1.0, 1.0) and state.winner() == 1
    assert state.legal_actions() == [] and state.current_player() == -1


def _seeds_with_equal_seat0_dice() -> tuple[int, int]:
    first_by_hand: dict[tuple[int, ...], int] = {}
    for seed in range(400):
        hand = _ld(seed).dice
        assert isinstance(hand, tuple)
        if hand[0] in first_by_hand:
            return first_by_hand[hand[0]], seed
        first_by_hand[hand[0]] = seed
    raise AssertionError("no two seeds dealt seat 0 the same hand")


def test_each_seat_sees_only_its_own_dice() -> None:
    seed_a, seed_b = _seeds_with_equal_seat0_dice()
    a, b = _ld(seed_a), _ld(seed_b)
    assert isinstance(a, LiarsDiceState) and isinstance(b, LiarsDiceState)
    assert a.dice[0] == b.dice[0] and a.dice[1] != b.dice[1]
    own = ", ".join(map(str, a.dice[0]))
    assert f"Your current dice are: {own}" in a.observation(0)
    for move in ("[Bid: 2, 3]", "[Bid: 3, 1]", "[Bid: 4, 4]"):
        a.apply_action(move)
        b.apply_action(move)
        assert a.observation(0) == b.observation(0)
        assert a.private_info(0) == b.private_info(0)
    assert a.observation(1) != b.observation(1)
    assert a.private_info(1) != b.private_info(1)


def test_random_games_end_zero_sum_without_truncation() -> None:
    outcomes = set()
    for seed in range(60):
        state = _ld(seed)
        _play_random(state, seed)
        assert not state.truncated()  # random play ends well inside 200 moves
        assert min(state.remaining) == 0 and 1 <= max(state.remaining) <= 5
        r0, r1 = state.returns()
        assert r0 == -r1 and abs(r0) == 1
        outcomes.add(r0)
    assert outcomes == {1.0, -1.0}


def test_same_seed_same_game_and_clone_independence() -> None:
    a, b = _ld(11), _ld(11)
    assert a.dice == b.dice
    clone = a.clone()
    _play_random(a, 1)
    _play_random(b, 1)
    assert a.move_history == b.move_history and a.observation(1) == b.observation(1)
    assert clone.move_history == [] and not clone.is_terminal()
    _play_random(clone, 1)  # the clone's rng was copied, not shared: it replays the game
    assert clone.move_history == a.move_history and clone.returns() == a.returns()


def test_max_turns_truncates_to_a_draw() -> None:
    state = _ld(0, max_turns=3)
    for move in ("[Bid: 1, 1]", "[Bid: 1, 2]", "[Bid: 1, 3]"):
        state.apply_action(move)
    assert state.is_terminal() and state.truncated() and state.returns() == (0.0, 0.0)


def test_long_runs_of_whitespace_parse_as_one_space() -> None:
    # A reply may hold 65,536 characters; runs of spaces are read in one pass.
    gap = " \t\n" * 20_000
    assert _ld(0).parse_action(f"[Bid: 3{gap},{gap}5]") == bid_move(3, 5)
    assert _ld(0).parse_action(f"[Bid: 1{gap}2 x]") is None
