"""Prioritised FSP weights against hand-worked numbers."""

from __future__ import annotations

import pytest

from spiral.algo.opponents import smoothed_win_rate, summed, variance_weight


def test_smoothed_win_rate_by_hand() -> None:
    assert smoothed_win_rate((0, 0, 0)) == 0.5  # unmet: (0 + 1) / (0 + 2)
    assert smoothed_win_rate((8, 0, 0)) == 0.9  # (8 + 1) / (8 + 2)
    assert smoothed_win_rate((0, 0, 8)) == 0.1  # 1 / 10
    assert smoothed_win_rate((3, 2, 3)) == 0.5  # (3 + 1 + 1) / 10


def test_variance_weight_prefers_even_opponents() -> None:
    assert variance_weight((0, 0, 0)) == 0.25
    assert variance_weight((8, 0, 0)) == pytest.approx(0.09)  # 0.9 * 0.1
    assert variance_weight((98, 0, 0)) == pytest.approx(0.99 * 0.01)
    assert variance_weight((5, 0, 5)) == 0.25
    # always beaten and always losing weigh the same: x (1 - x) is symmetric
    assert variance_weight((8, 0, 0)) == pytest.approx(variance_weight((0, 0, 8)))


def test_summed_records() -> None:
    assert summed([(1, 2, 3), (4, 0, 1)]) == (5, 2, 4)
    assert summed([]) == (0, 0, 0)
