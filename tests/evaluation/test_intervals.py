"""Wilson and mean intervals against values worked by hand from the formulas."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spiral.evaluation.intervals import Rate, mean_ci, wilson_interval

Z = 1.959964
Z2 = Z * Z  # 3.8414589


def test_wilson_8_of_10() -> None:
    # p = 0.8, z^2/n = 0.38414589, denom = 1.38414589
    # centre = (0.8 + 0.19207295) / 1.38414589 = 0.716740
    # half = 1.959964 / 1.38414589 * sqrt(0.016 + 0.0096036) = 1.416011 * 0.160011 = 0.226577
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.490162, abs=1e-4)
    assert high == pytest.approx(0.943318, abs=1e-4)


def test_wilson_zero_successes() -> None:
    # p = 0: centre = half = (z^2 / 2n) / (1 + z^2/n), so low = 0 and high = 2 * centre
    low, high = wilson_interval(0, 10)
    assert low == 0.0
    assert high == pytest.approx((Z2 / 10) / (1 + Z2 / 10), abs=1e-12)
    assert high == pytest.approx(0.277533, abs=1e-4)


def test_wilson_all_successes_mirrors_zero() -> None:
    low, high = wilson_interval(10, 10)
    assert high == 1.0
    assert low == pytest.approx(1 - 0.277533, abs=1e-4)


def test_wilson_half_of_100() -> None:
    # centre 0.5; half = z / 1.03841459 * sqrt(0.0025 + z^2 / 40000) = 1.887436 * 0.050951
    low, high = wilson_interval(50, 100)
    assert low == pytest.approx(0.403832, abs=1e-4)
    assert high == pytest.approx(0.596168, abs=1e-4)


def test_wilson_no_trials_is_uninformative() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize(("successes", "n"), [(-1, 5), (6, 5), (0, -1)])
def test_wilson_rejects_impossible_counts(successes: int, n: int) -> None:
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(successes, n)


@given(st.integers(min_value=1, max_value=10_000), st.data())
def test_wilson_contains_p_and_stays_in_unit_interval(n: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(min_value=0, max_value=n))
    low, high = wilson_interval(k, n)
    assert 0.0 <= low <= k / n <= high <= 1.0
    assert low < high


@given(st.integers(min_value=1, max_value=500), st.integers(min_value=2, max_value=20))
def test_wilson_narrows_with_more_trials_at_same_rate(n: int, factor: int) -> None:
    # Same observed rate p = 1/2 (k = n, out of 2n) with more trials: strictly narrower.
    small = wilson_interval(n, 2 * n)
    large = wilson_interval(n * factor, 2 * n * factor)
    assert large[1] - large[0] < small[1] - small[0]


def test_rate_value_bounds_and_format() -> None:
    rate = Rate(8, 10)
    assert rate.value == 0.8
    assert (rate.low, rate.high) == wilson_interval(8, 10)
    assert rate.fmt() == "0.80 [0.49, 0.94]"
    assert rate.fmt(3) == "0.800 [0.490, 0.943]"
    assert str(Rate(50, 100)) == "0.50 [0.40, 0.60]"


def test_rate_with_no_trials_is_nan_not_zero() -> None:
    rate = Rate(0, 0)
    assert math.isnan(rate.value)
    assert (rate.low, rate.high) == (0.0, 1.0)


def test_rate_rejects_more_successes_than_trials() -> None:
    with pytest.raises(ValueError, match="successes"):
        Rate(3, 2)


def test_mean_ci_by_hand() -> None:
    # mean 2.5; sample variance (2.25 + 0.25 + 0.25 + 2.25) / 3 = 5/3; se = sqrt(5/12)
    mean, low, high = mean_ci([1, 2, 3, 4])
    half = Z * math.sqrt(5 / 12)  # 1.265152
    assert mean == 2.5
    assert low == pytest.approx(2.5 - half, abs=1e-9)
    assert high == pytest.approx(2.5 + half, abs=1e-9)
    assert half == pytest.approx(1.265152, abs=1e-5)


def test_mean_ci_constant_values_has_zero_width() -> None:
    assert mean_ci([0.5, 0.5, 0.5]) == (0.5, 0.5, 0.5)


def test_mean_ci_small_samples() -> None:
    mean, low, high = mean_ci([])
    assert math.isnan(mean) and low == -math.inf and high == math.inf
    assert mean_ci([3.0]) == (3.0, -math.inf, math.inf)


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=2, max_size=200))
def test_mean_ci_contains_mean(values: list[float]) -> None:
    mean, low, high = mean_ci(values)
    assert low <= mean <= high
    assert min(values) - 1e-6 <= mean <= max(values) + 1e-6
