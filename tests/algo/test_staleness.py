"""staleness_lr_scale: the trained-token-weighted mean of 1 / max(1, age), by hand."""

from __future__ import annotations

import pytest

from spiral.algo.staleness import kl_lr_scale, staleness_lr_scale
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


def test_rows_count_by_trained_tokens_times_weight() -> None:
    # Learner at version 5. Fresh row: 1 token x weight 2 = 2 tokens at 1. Two behind:
    # 2 tokens at 1/2. Three behind: 1 token at 1/3. Unknown version: 1 token at 1.
    rows = [_row(5, 1, weight=2.0), _row(3, 2), _row(2, 1), _row(-1, 1)]
    expected = (2 * 1 + 2 * 0.5 + 1 / 3 + 1) / (2 + 2 + 1 + 1)
    assert staleness_lr_scale(rows, version=5) == pytest.approx(expected)  # 0.7222


def test_fresh_and_one_behind_keep_the_learning_rate() -> None:
    assert staleness_lr_scale([_row(4, 3), _row(3, 1)], version=4) == 1.0
    assert staleness_lr_scale([_row(2, 1)], version=4) == 0.5
    assert staleness_lr_scale([], version=4) == 1.0


def test_kl_scale_shrinks_steps_beyond_the_target_only() -> None:
    assert kl_lr_scale(0.5, target=0.05) == pytest.approx(0.1)
    assert kl_lr_scale(0.05, target=0.05) == 1.0
    assert kl_lr_scale(0.004, target=0.05) == 1.0
    assert kl_lr_scale(2.0, target=0.0) == 1.0  # off
