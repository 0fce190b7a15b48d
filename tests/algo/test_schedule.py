"""Schedules against hand-worked values, and every word they print parses back."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spiral.algo import schedule
from spiral.errors import UsageError


def test_a_constant_is_the_same_at_every_step() -> None:
    s = schedule.parse("0.2")
    assert [s.at(k, 10) for k in (0, 5, 9, 50)] == [0.2, 0.2, 0.2, 0.2]
    assert s.to_json() == 0.2 and str(s) == "0.2"


def test_linear_runs_from_the_first_step_to_the_last() -> None:
    s = schedule.parse("0.3->0.1")  # 11 steps: 0..10, 0.02 a step
    assert [s.at(k, 11) for k in (0, 5, 10, 20)] == pytest.approx([0.3, 0.2, 0.1, 0.1])
    assert s.at(7, 1) == 0.3  # a one-step run takes the start


def test_cosine_is_half_a_cosine_between_the_ends() -> None:
    s = schedule.parse("cosine:1e-3->1e-5")
    assert s.at(0, 5) == pytest.approx(1e-3)
    assert s.at(2, 5) == pytest.approx((1e-3 + 1e-5) / 2)  # the middle step
    assert s.at(1, 5) == pytest.approx(1e-5 + (1e-3 - 1e-5) * 0.5 * (1 + math.cos(math.pi / 4)))
    assert s.at(4, 5) == pytest.approx(1e-5)


def test_drops_multiply_from_their_step_on() -> None:
    s = schedule.parse("1e-3*0.3@30*0.1@60")
    assert [s.at(k, 120) for k in (0, 29, 30, 59, 60, 119)] == pytest.approx(
        [1e-3, 1e-3, 3e-4, 3e-4, 3e-5, 3e-5]
    )
    # one drop is start * factor exactly, as the step schedule always computed it
    assert schedule.parse("1e-3*0.3@30").at(30, 120) == 1e-3 * 0.3
    assert s.values == pytest.approx((1e-3, 3e-4, 3e-5))


@pytest.mark.parametrize(
    "word",
    [
        "",
        "abc",
        "0.1->",
        "->0.1",
        "cosine:1",
        "1e-3*0.3",
        "1e-3*0.3@0",
        "1*0.5@5*0.5@3",
        "nan",
        "inf->0",
        "1@x",
    ],
)
def test_a_word_that_is_no_schedule_is_one_line(word: str) -> None:
    with pytest.raises(UsageError, match="is not a schedule: "):
        schedule.parse(word)


@pytest.mark.parametrize(
    ("word", "reason"),
    [
        ("1e308*10@5", "its values must stay finite"),
        ("1e-3*0.3@60*0.1@30", "drops must be at increasing steps > 0"),
        ("1e-3*0.3@0", "drops must be at increasing steps > 0"),
    ],
)
def test_a_schedule_that_breaks_a_rule_says_which(word: str, reason: str) -> None:
    with pytest.raises(UsageError, match=reason):
        schedule.parse(word)


finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
schedules = st.one_of(
    finite.map(schedule.constant),
    st.tuples(finite, finite).map(lambda ab: schedule.linear(*ab)),
    st.tuples(finite, finite).map(lambda ab: schedule.Schedule("cosine", *ab)),
    st.tuples(
        finite,
        st.lists(
            st.tuples(st.integers(1, 10_000), finite),
            min_size=1,
            max_size=4,
            unique_by=lambda d: d[0],
        ),
    ).map(lambda t: schedule.Schedule("steps", t[0], drops=tuple(sorted(t[1])))),
)


@given(schedules, st.integers(0, 10_000), st.integers(1, 10_000))
def test_every_schedule_prints_a_word_that_parses_back(
    s: schedule.Schedule, step: int, steps: int
) -> None:
    again = schedule.parse(str(s))
    assert again == s and again.at(step, steps) == s.at(step, steps)
    assert schedule.parse(str(s.to_json())) == s  # what config.json stores reads back
