"""merge_identical: identical rows of one advantage sign become one weighted row."""

from __future__ import annotations

import pytest

from spiral.algo.merge import merge_identical, split_minibatches
from spiral.types import AnswerConstraint, Datum

CONSTRAINT = AnswerConstraint(choices=((7,), (8,)))


def _row(answer: int, advantage: float, logprob: float = -0.5, weight: float = 1.0) -> Datum:
    return Datum(
        input_ids=(1, 2, 3),
        target_ids=(2, 3, answer),
        sampler_logprobs=(0.0, 0.0, logprob),
        advantages=(0.0, 0.0, advantage),
        mask=(0.0, 0.0, 1.0),
        constraint_start=2,
        constraint=CONSTRAINT,
        game_id="KuhnPokerSingle-v0",
        seat=1,
        weight=weight,
    )


def test_same_rows_same_sign_merge_into_weighted_mean() -> None:
    rows = [_row(7, 1.0), _row(7, 2.0), _row(7, -1.0), _row(8, 0.5), _row(7, 0.0), _row(7, -3.0)]
    merged, metrics = merge_identical(rows)
    # Groups: answer 7 with A >= 0 (1, 2, 0), answer 7 with A < 0 (-1, -3), answer 8 (0.5).
    assert [(d.target_ids[-1], d.weight, d.advantages[-1]) for d in merged] == [
        (7, 3.0, pytest.approx(1.0)),
        (7, 2.0, pytest.approx(-2.0)),
        (8, 1.0, 0.5),
    ]
    # weight * mean advantage = the group's summed advantage.
    assert sum(d.weight * d.advantages[-1] for d in merged) == pytest.approx(-0.5)
    assert metrics == {"merge/rows_in": 6.0, "merge/rows_out": 3.0, "merge/ratio": 2.0}


def test_rows_that_differ_anywhere_stay_apart() -> None:
    a = _row(7, 1.0)
    other_logprob = _row(7, 1.0, logprob=-0.5000001)  # sampled in another call
    other_seat = Datum(**{**a.__dict__, "seat": 0})
    merged, _ = merge_identical([a, other_logprob, other_seat])
    assert len(merged) == 3


def test_weights_add_up_and_weighted_means_stay_exact() -> None:
    merged, _ = merge_identical([_row(7, 1.0, weight=3.0), _row(7, 2.0, weight=1.0)])
    assert merged[0].weight == 4.0 and merged[0].advantages[-1] == pytest.approx(1.25)
    again, _ = merge_identical([*merged, _row(7, 5.0)])
    assert again[0].weight == 5.0 and again[0].advantages[-1] == pytest.approx(2.0)


def test_split_minibatches_covers_every_row_once() -> None:
    rows = [_row(7, float(k)) for k in range(10)]
    parts = split_minibatches(rows, 3, seed=1)
    assert [len(p) for p in parts] == [4, 3, 3]
    assert sorted(d.advantages[-1] for p in parts for d in p) == [float(k) for k in range(10)]
    assert split_minibatches(rows, 3, seed=1) == parts  # seeded
    assert [len(p) for p in split_minibatches(rows[:2], 4, seed=0)] == [1, 1]
    with pytest.raises(ValueError, match="num_substeps"):
        split_minibatches(rows, 0, seed=0)
