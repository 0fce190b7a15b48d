"""The regularised equilibrium of Kuhn poker: known values and the fixed-point property."""

from __future__ import annotations

import pytest

from spiral.analysis.exploitability import kuhn_moves, kuhn_nash_policy
from spiral.analysis.qre import action_values, regularized_equilibrium, regularized_response

INFOS = [f"{c}{h}" for h in ("", "pb", "p", "b") for c in range(3)]


def _nash_table(alpha: float) -> dict[str, float]:
    nash = kuhn_nash_policy(alpha)
    return {k: nash(k, 0 if k[1:] in ("", "pb") else 1)[kuhn_moves(k)[1]] for k in INFOS}


def test_action_values_at_nash_make_mixed_states_indifferent() -> None:
    q = action_values(_nash_table(0.2))
    # Where Nash mixes (J and K opening for alpha > 0, Q calling, J bluffing as seat 1,
    # Q calling a bet as seat 1) both moves are worth the same.
    for info in ("0", "2", "1pb", "0p", "1b"):
        assert q[info][0] == pytest.approx(q[info][1], abs=1e-12), info
    # Hand-worked: K facing a bet wins 2 by calling, loses 1 by folding.
    assert q["2b"] == pytest.approx((-1.0, 2.0))
    assert q["0pb"] == pytest.approx((-1.0, -2.0))  # J facing a bet: fold loses 1, call 2


def test_equilibrium_is_a_fixed_point_and_nears_nash_as_coefficients_shrink() -> None:
    pytest.importorskip("pyspiel")
    from spiral.analysis.exploitability import kuhn_exploitability

    def exploitability(table: dict[str, float]) -> float:
        return kuhn_exploitability(
            lambda info, seat: dict(
                zip(kuhn_moves(info), (1 - table[info], table[info]), strict=True)
            )
        )["exploitability"]

    values = []
    for alpha in (0.2, 0.1, 0.05):
        table = regularized_equilibrium(alpha)
        response = regularized_response(table, alpha)
        assert max(abs(response[k] - table[k]) for k in INFOS) < 1e-6
        # Where Nash mixes (J bluffs, Q calls a bet) the regularised play stays mixed.
        assert all(0.05 < table[k] < 0.95 for k in ("0", "1pb", "0p", "1b"))
        values.append(exploitability(table))
    assert values[0] > values[1] > values[2]
    assert values[1] == pytest.approx(0.0189, abs=5e-4)  # documented in docs/results.md
    # A KL magnet pulls the fixed point towards it.
    magnet = dict.fromkeys(INFOS, 0.9)
    pulled = regularized_equilibrium(0.0, kl_coef=0.1, magnet=magnet)
    plain = regularized_equilibrium(0.1)
    assert pulled["1"] > plain["1"]
    with pytest.raises(ValueError, match="> 0"):
        regularized_equilibrium(0.0)
