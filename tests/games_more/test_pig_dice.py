"""PigDice-v1: rolls replayed from the seed, holding, busting, winning, the pass cap."""

from __future__ import annotations

import random

import pytest

from spiral.games import make
from spiral.games.pig_dice import HOLD, ROLL, PigDiceState


def _pig(seed: int = 0, **params: int) -> PigDiceState:
    state = make("PigDice-v1", seed=seed, **params)
    assert isinstance(state, PigDiceState)
    return state


def test_rolls_follow_the_seeded_rng_and_a_roll_keeps_the_turn() -> None:
    seed = 4
    expected = random.Random(seed)  # the state's only use of its rng is die rolls
    state = _pig(seed)
    total = 0
    while True:
        roll = expected.randint(1, 6)
        state.apply_action(ROLL)
        if roll == 1:
            assert state.current_player() == 1 and state.turn_total == 0
            assert state.scores == [0, 0] and state.passes == 1
            break
        total += roll
        assert state.current_player() == 0 and state.turn_total == total


def _seed_whose_first_roll_is(predicate) -> int:  # type: ignore[no-untyped-def]
    return next(s for s in range(100) if predicate(random.Random(s).randint(1, 6)))


def test_hold_banks_the_turn_total_and_passes() -> None:
    seed = _seed_whose_first_roll_is(lambda r: r > 1)
    first = random.Random(seed).randint(1, 6)
    state = _pig(seed)
    state.apply_action(ROLL)
    state.apply_action(HOLD)
    assert state.scores == [first, 0] and state.turn_total == 0
    assert state.current_player() == 1 and f"banking {first}" in state.observation(1)


def test_reaching_the_target_wins_at_once() -> None:
    seed = _seed_whose_first_roll_is(lambda r: r >= 3)
    state = _pig(seed, winning_score=3)
    state.apply_action("[r]")
    state.apply_action("[H]")
    assert state.is_terminal() and not state.truncated()
    assert state.returns() == (1.0, -1.0) and state.winner() == 0


def test_pass_cap_ends_by_score() -> None:
    state = _pig(0, turn_cap=2)
    state.apply_action(HOLD)
    state.apply_action(HOLD)
    assert state.is_terminal() and state.returns() == (0.0, 0.0) and not state.truncated()
    seed = _seed_whose_first_roll_is(lambda r: r > 1)
    state = _pig(seed, turn_cap=3)
    state.apply_action(ROLL)
    for _ in range(3):
        state.apply_action(HOLD)
    assert state.is_terminal() and state.returns() == (1.0, -1.0)
    assert "turn cap (3)" in state.observation(1)


@pytest.mark.parametrize(
    ("text", "move"), [("[r]", ROLL), ("[ROLL]", ROLL), (" [ h ] ", HOLD), ("[Hold]", HOLD)]
)
def test_shorthands(text: str, move: str) -> None:
    assert _pig().parse_action(text) == move


@pytest.mark.parametrize("text", ["roll", "[rol]", "[roll] [hold]", ""])
def test_other_text_is_not_a_move(text: str) -> None:
    assert _pig().parse_action(text) is None


def test_random_games_end_zero_sum_and_replay_from_the_seed() -> None:
    outcomes = set()
    for seed in range(100):
        a, b = _pig(seed), _pig(seed)
        rng_a, rng_b = random.Random(seed), random.Random(seed)
        while not a.is_terminal():
            a.apply_action(rng_a.choice(a.legal_actions()))
            b.apply_action(rng_b.choice(b.legal_actions()))
        assert b.is_terminal() and a.observation(0) == b.observation(0)
        assert a.passes <= 50 and sum(a.returns()) == 0
        if a.returns() != (0.0, 0.0):
            assert max(a.scores) >= 50 or a.passes == 50
        outcomes.add(a.returns())
    assert {(1.0, -1.0), (-1.0, 1.0)} <= outcomes
