"""The average of a run's logged Kuhn policies: read from metrics rows (a re-evaluated
step counts once), exact against known values (uniform play 11/24, any mixture of Nash
policies a Nash policy), and the averaging is the reach-weighted one, not per state."""

from __future__ import annotations

import pytest

from spiral.analysis.exploitability import KUHN_CARDS, KUHN_GAME_ID, kuhn_exploitability
from spiral.analysis.iterate_average import (
    average_report,
    iterate_average_metrics,
    logged_tables,
    table_policy,
)
from spiral.games.kuhn_equilibrium import nash_bet_probability

pytest.importorskip("pyspiel")
STATES = [c + h for c in KUHN_CARDS for h in ("", "p", "b", "pb")]


def _table(p_of) -> dict[str, float]:  # type: ignore[no-untyped-def]
    return {s: p_of(KUHN_CARDS.index(s[0]), s[1:]) for s in STATES}


def _nash(alpha: float) -> dict[str, float]:
    return _table(lambda card, history: nash_bet_probability(alpha, card, history))


def _row(step: int, table: dict[str, float]) -> dict:
    return {"step": step, **{f"eval/{KUHN_GAME_ID}/p_bet_t1/{s}": p for s, p in table.items()}}


def test_tables_come_from_the_rows_and_a_re_evaluated_step_counts_once() -> None:
    uniform = _table(lambda card, history: 0.5)
    rows = [_row(0, uniform), {"step": 1, "train/loss": 1.0}, _row(2, _nash(0.0)), _row(2, uniform)]
    assert logged_tables(rows) == [(0, uniform), (2, uniform)]


def test_known_values() -> None:
    uniform = _table(lambda card, history: 0.5)
    assert average_report([uniform, uniform])["exploitability"] == pytest.approx(11 / 24)
    # Equilibria are closed under mixing: the average of two Nash policies is Nash.
    assert average_report([_nash(0.0), _nash(1 / 3)])["exploitability"] == pytest.approx(
        0, abs=1e-9
    )
    # One table: the table's own numbers.
    single = kuhn_exploitability(table_policy(_nash(0.2)))["exploitability"]
    assert average_report([_nash(0.2)])["exploitability"] == pytest.approx(single)


def test_a_cycle_averages_to_less_than_its_points() -> None:
    """Two exploitable policies on either side of an equilibrium (bluffing a Jack 0.15
    more and 0.15 less often than the alpha = 1/6 Nash policy): each is exploitable,
    their average is that equilibrium."""
    over = _nash(1 / 6) | {"J": 1 / 6 + 0.15}
    under = _nash(1 / 6) | {"J": 1 / 6 - 0.15}
    each = [kuhn_exploitability(table_policy(t))["exploitability"] for t in (over, under)]
    assert min(each) > 0.01
    assert average_report([over, under])["exploitability"] == pytest.approx(0, abs=1e-9)


def test_metrics_over_every_evaluation_and_the_second_half() -> None:
    rows = [_row(0, _table(lambda c, h: 0.5)), _row(10, _nash(0.0)), _row(20, _nash(0.1))]
    got = iterate_average_metrics(rows)
    prefix = f"eval/{KUHN_GAME_ID}"
    assert got[f"{prefix}/iterates_average/evaluations"] == 3
    assert got[f"{prefix}/iterates_second_half/exploitability_t1"] == pytest.approx(0, abs=1e-9)
    assert 0 < got[f"{prefix}/iterates_average/exploitability_t1"] < 11 / 24
    assert iterate_average_metrics([{"step": 0, "train/loss": 1.0}]) == {}
