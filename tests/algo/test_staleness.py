"""A row's age and the step-size factor from the sampler-to-learner KL, by hand."""

from __future__ import annotations

import math

import pytest

from spiral.algo.staleness import kl_lr_scale, row_age, rows_approx_kl, step_shrink
from spiral.types import Datum


def _row(version: int, trained: int, weight: float = 1.0) -> Datum:
    n = trained + 1  # one prompt position, then `trained` answer tokens
    return Datum(
        input_ids=tuple(range(1, n + 1)),
        target_ids=tuple(range(2, n + 2)),
        sampler_logprobs=(0.0,) * n,
        advantages=(1.0,) * n,
        mask=(0.0,) + (1.0,) * trained,
        weight=weight,
        policy_version=version,
    )


def test_a_rows_age_is_versions_behind_the_learner() -> None:
    assert row_age(_row(3, 1), version=5) == 2
    assert row_age(_row(5, 1), version=5) == 0
    assert row_age(_row(-1, 1), version=5) == 0  # unknown: counted as fresh


def test_kl_scale_shrinks_steps_beyond_the_target_only() -> None:
    assert kl_lr_scale(0.5, target=0.05) == pytest.approx(0.1)
    assert kl_lr_scale(0.05, target=0.05) == 1.0
    assert kl_lr_scale(0.004, target=0.05) == 1.0
    assert kl_lr_scale(2.0, target=0.0) == 1.0  # off


def test_rows_approx_kl_is_k3_over_masked_tokens_weighted_by_row() -> None:
    # Row 1: one masked token with log-ratio 0.5; row 2 (weight 3): log-ratio -0.2, and a
    # prompt token (mask 0) whose difference must not count.
    old = [[-1.0, -0.7], [-2.0, -0.5]]
    new = [[-9.0, -0.2], [0.0, -0.7]]
    masks = [[0.0, 1.0], [0.0, 1.0]]
    k3 = lambda r: math.expm1(r) - r  # noqa: E731
    expected = (1 * k3(0.5) + 3 * k3(-0.2)) / 4
    assert rows_approx_kl(old, new, masks, [1.0, 3.0]) == pytest.approx(expected)
    assert expected == pytest.approx((0.148721 + 3 * 0.018731) / 4, abs=1e-6)
    assert rows_approx_kl(old, old, masks, [1.0, 3.0]) == 0.0
    assert rows_approx_kl([[0.0]], [[1.0]], [[0.0]], [1.0]) == 0.0  # nothing masked


def test_step_shrink_brings_a_quadratic_kl_to_the_bound() -> None:
    assert step_shrink(2.0, 0.05) == pytest.approx(math.sqrt(0.025))
    # KL quadratic in the step: the shrunk step's KL is the bound.
    assert 2.0 * step_shrink(2.0, 0.05) ** 2 == pytest.approx(0.05)
    assert step_shrink(0.05, 0.05) == 1.0
    assert step_shrink(0.01, 0.05) == 1.0
    assert step_shrink(2.0, 0.0) == 1.0  # off
