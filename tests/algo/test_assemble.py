"""assemble: every array of every Datum checked by hand, including the one-token shift."""

from __future__ import annotations

import pytest

from spiral.algo.assemble import assemble, turn_to_datum
from spiral.types import AnswerConstraint, Completion, Episode, Turn

GAME = "TicTacToe-v0"


def _turn(
    seat: int, prompt: tuple[int, ...], tokens: tuple[int, ...], logprobs: tuple[float, ...]
) -> Turn:
    return Turn(GAME, seat, "policy", "obs", prompt, Completion(tokens, logprobs, "eos", "t"))


def _scripted(seat: int) -> Turn:
    return Turn(GAME, seat, "random", "obs")


def test_plain_turn_layout() -> None:
    turn = _turn(0, (10, 11, 12), (20, 21), (-0.5, -0.25))
    datum = turn_to_datum(turn, 0.7)
    assert datum.input_ids == (10, 11, 12, 20)
    assert datum.target_ids == (11, 12, 20, 21)
    assert datum.sampler_logprobs == (0.0, 0.0, -0.5, -0.25)
    assert datum.advantages == (0.0, 0.0, 0.7, 0.7)
    assert datum.mask == (0.0, 0.0, 1.0, 1.0)
    assert datum.constraint_start is None and datum.constraint is None
    assert (datum.game_id, datum.seat) == (GAME, 0)


def test_forced_marker_tokens_are_masked() -> None:
    constraint = AnswerConstraint(choices=((40,), (41,)), marker=(90, 91), think_budget=2)
    completion = Completion(
        tokens=(30, 31, 90, 91, 40),
        logprobs=(-1.0, -2.0, 0.0, 0.0, -0.3),
        stop_reason="stop",
        text="..",
        answer_start=4,
        constraint=constraint,
    )
    turn = Turn(GAME, 1, "policy", "obs", (1, 2), completion)
    datum = turn_to_datum(turn, -1.0)
    assert datum.input_ids == (1, 2, 30, 31, 90, 91)
    assert datum.target_ids == (2, 30, 31, 90, 91, 40)
    assert datum.sampler_logprobs == (0.0, -1.0, -2.0, 0.0, 0.0, -0.3)
    assert datum.advantages == (0.0, -1.0, -1.0, -1.0, -1.0, -1.0)
    assert datum.mask == (0.0, 1.0, 1.0, 0.0, 0.0, 1.0)
    # constraint_start points at the first choice token in target coordinates.
    assert datum.constraint_start == 5 and datum.target_ids[5] == 40
    assert datum.constraint is constraint


def test_constraint_without_marker_masks_nothing_extra() -> None:
    constraint = AnswerConstraint(choices=((7,), (8,)))
    completion = Completion((7,), (-0.7,), "stop", "", answer_start=0, constraint=constraint)
    datum = turn_to_datum(Turn(GAME, 0, "policy", "o", (3, 4, 5), completion), 1.0)
    assert datum.mask == (0.0, 0.0, 1.0)
    assert datum.constraint_start == 2 and datum.target_ids[2] == 7


def test_episode_discount_order_and_scripted_seat() -> None:
    first = _turn(0, (1,), (5,), (-0.1,))
    second = _turn(0, (1, 5, 2), (6, 7), (-0.2, -0.3))
    episode = Episode(GAME, 0, (first, _scripted(1), second), (1.0, -1.0), "win")
    datums, metrics = assemble([episode], {(0, 0): 2.0}, gamma=0.5)
    assert len(datums) == 2
    # Seat 0 has two turns: 2.0 * 0.5 ** (2 - 1 - i) -> 1.0 then 2.0.
    assert datums[0].input_ids == (1,) and datums[0].target_ids == (5,)
    assert datums[0].advantages == (1.0,) and datums[0].mask == (1.0,)
    assert datums[1].advantages == (0.0, 0.0, 2.0, 2.0)
    assert metrics["assemble/num_datums"] == 2.0
    assert metrics["assemble/num_tokens"] == 3.0
    assert metrics["assemble/num_trained_tokens"] == 3.0
    assert metrics["assemble/mean_advantage"] == pytest.approx(1.5)
    assert metrics["assemble/std_advantage"] == pytest.approx(0.5)
    assert metrics["assemble/min_advantage"] == 1.0 and metrics["assemble/max_advantage"] == 2.0


def test_filter_zero_adv_and_skipped_seats() -> None:
    draw = Episode(
        GAME, 1, (_turn(0, (1, 2), (3,), (-1.0,)), _turn(1, (1, 2), (4,), (-1.0,))), (0, 0), "draw"
    )
    win = Episode(
        GAME, 2, (_turn(0, (1, 2), (3,), (-1.0,)), _turn(1, (1, 2), (4,), (-1.0,))), (1, -1), "win"
    )
    # Episode 1 seat 1 has no advantage (say, a frozen opponent): skipped, not an error.
    advantages = {(0, 0): 0.0, (0, 1): 0.0, (1, 0): 0.5}
    kept, metrics = assemble([draw, win], advantages, filter_zero_adv=True)
    assert [(d.seat, d.advantages) for d in kept] == [(0, (0.0, 0.5))]
    assert metrics["assemble/num_filtered_turns"] == 2.0
    assert metrics["assemble/num_skipped_turns"] == 1.0
    unfiltered, _ = assemble([draw, win], advantages)
    assert len(unfiltered) == 3


def test_empty_batch_metrics_are_zero() -> None:
    datums, metrics = assemble([], {})
    assert datums == []
    assert metrics["assemble/num_datums"] == 0.0 and metrics["assemble/std_advantage"] == 0.0


def test_bad_turns_fail_loudly() -> None:
    with pytest.raises(ValueError, match="one per token"):
        turn_to_datum(_turn(0, (1, 2), (3, 4), (-1.0,)), 1.0)
    with pytest.raises(ValueError, match="prompt_ids"):
        turn_to_datum(_turn(0, (), (3,), (-1.0,)), 1.0)
    constraint = AnswerConstraint(choices=((40,),), marker=(90, 91))
    wrong = Completion((30, 90, 92, 40), (-1, 0, 0, 0), "stop", "", 3, constraint)
    with pytest.raises(ValueError, match="not the marker"):
        turn_to_datum(Turn(GAME, 0, "policy", "o", (1,), wrong), 1.0)
    early = Completion((90, 40), (0, 0), "stop", "", 1, constraint)
    with pytest.raises(ValueError, match="answer_start"):
        turn_to_datum(Turn(GAME, 0, "policy", "o", (1,), early), 1.0)


def test_single_option_answer_tokens_are_masked() -> None:
    # Kuhn-like answers " [" + word + "]": only the word is a choice; " [" and "]" are
    # the only legal token where they stand, so they carry no gradient and no statistic.
    constraint = AnswerConstraint(choices=((5, 11, 9), (5, 12, 9)))
    completion = Completion((5, 12, 9), (0.0, -0.4, 0.0), "stop", "", 0, constraint)
    datum = turn_to_datum(Turn(GAME, 0, "policy", "o", (1, 2), completion), 1.0)
    assert datum.target_ids == (2, 5, 12, 9)
    assert datum.mask == (0.0, 0.0, 1.0, 0.0)
    # A trie that branches twice keeps both branching tokens and masks the rest.
    deep = AnswerConstraint(choices=((5, 11, 9), (5, 12, 7, 9), (5, 12, 8, 9)))
    completion = Completion((5, 12, 8, 9), (0.0, -0.4, -0.7, 0.0), "stop", "", 0, deep)
    datum = turn_to_datum(Turn(GAME, 0, "policy", "o", (1,), completion), 1.0)
    assert datum.mask == (0.0, 1.0, 1.0, 0.0)
    _, metrics = assemble(
        [Episode(GAME, 0, (Turn(GAME, 0, "policy", "o", (1,), completion),), (1, -1), "win")],
        {(0, 0): 1.0},
    )
    assert metrics["assemble/num_trained_tokens"] == 2.0


def test_answer_constraint_next_tokens_counts_moves_through_each_token() -> None:
    deep = AnswerConstraint(choices=((5, 11, 9), (5, 12, 7, 9), (5, 12, 8, 9)))
    assert deep.next_tokens(()) == {5: 3}
    assert deep.next_tokens((5,)) == {11: 1, 12: 2}
    assert deep.next_tokens((5, 12)) == {7: 1, 8: 1}
    assert deep.next_tokens((5, 12, 7, 9)) == {}
