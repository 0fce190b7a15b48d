"""`summarize`: a matchup's outcome counts and the candidate's mean return (chips in the
poker games) with its interval, checked against hand-worked numbers."""

from __future__ import annotations

import json
import math

import pytest

from spiral.evaluation.compare import report_rows
from spiral.evaluation.match import summarize
from spiral.evaluation.run import result_row
from spiral.types import Episode


def _episode(seed: int, returns: tuple[float, float]) -> Episode:
    winner = None if returns[0] == returns[1] else (0 if returns[0] > returns[1] else 1)
    return Episode("LeducPoker-v0", seed, (), returns, "win", winner=winner)


def test_mean_return_is_the_candidates_chips_with_an_interval() -> None:
    # the candidate in seat 1 wins 3, loses 1, wins 5 and splits: returns 3, -1, 5, 0
    eps = [_episode(0, (-3, 3)), _episode(1, (1, -1)), _episode(2, (-5, 5)), _episode(3, (0, 0))]
    r = summarize("LeducPoker-v0", "random", 1, eps)
    assert (r.wins, r.losses, r.draws) == (2, 1, 1)
    assert r.mean_return == pytest.approx(1.75)
    # sample sd of (3, -1, 5, 0): sqrt(22.75 / 3) (deviations 1.25, -2.75, 3.25, -1.75); half width 1.96 * sd / 2
    half = 1.959963984540054 * math.sqrt(22.75 / 3) / 2
    assert (r.return_low, r.return_high) == pytest.approx((1.75 - half, 1.75 + half))
    metrics = r.metrics()
    assert metrics["eval/LeducPoker-v0/random/seat1/mean_return"] == pytest.approx(1.75)
    assert metrics["eval/LeducPoker-v0/random/seat1/mean_return_low"] == pytest.approx(1.75 - half)


def test_one_game_has_no_interval_and_the_report_stays_json() -> None:
    r = summarize("LeducPoker-v0", "random", 0, [_episode(0, (2, -2))])
    assert r.mean_return == 2.0
    assert "eval/LeducPoker-v0/random/seat0/mean_return_low" not in r.metrics()
    row = result_row(r)
    assert row["return_low"] is None and row["return_high"] is None
    json.loads(json.dumps(row, allow_nan=False))  # strict JSON: no Infinity
    rows = report_rows(3, {"results": [row]})
    mean = [x for x in rows if x["metric"] == "mean_return"]
    assert len(mean) == 1 and mean[0]["value"] == 2.0 and mean[0]["low"] == ""


def test_no_games_give_no_mean_and_strict_json() -> None:
    r = summarize("LeducPoker-v0", "random", 0, [])
    assert "eval/LeducPoker-v0/random/seat0/mean_return" not in r.metrics()
    row = result_row(r)
    assert row["mean_return"] is None
    json.loads(json.dumps(row, allow_nan=False))
    assert not [x for x in report_rows(0, {"results": [row]}) if x["metric"] == "mean_return"]
