"""A row's age and the step-size factor from the sampler-to-learner KL, by hand."""

from __future__ import annotations

import pytest

from spiral.algo.staleness import kl_lr_scale, row_age
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
