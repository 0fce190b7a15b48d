"""The move floor's exact bias (`benchmarks/kuhn_floor_bound.py`): the least exploitability
of a Kuhn policy that keeps every move at p_min or more. No floored policy may do better
than the linear programs' optimum, and the optimum must be attained by a floored policy."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from spiral.analysis.exploitability import kuhn_exploitability

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "kuhn_floor_bound.py"


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("kuhn_floor_bound", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


BOUND = _script()
STATES = ("0", "1", "2", "0pb", "1pb", "2pb", "0p", "1p", "2p", "0b", "1b", "2b")


def test_without_a_floor_the_least_is_the_equilibrium() -> None:
    low_first, _ = BOUND.first_seat(0.0)
    low_second, _ = BOUND.second_seat(0.0)
    assert abs(low_first - 1 / 18) < 1e-9  # the second seat's game value
    assert abs(low_second + 1 / 18) < 1e-9
    assert abs(BOUND.bound(0.0)["least"]) < 1e-9


def test_the_bound_is_attained_by_a_floored_policy_and_beats_clipping() -> None:
    for p_min in (0.05, 0.1, 0.2):
        found = BOUND.bound(p_min)
        policy = found["policy"]
        assert all(p_min - 1e-6 <= policy[s] <= 1 - p_min + 1e-6 for s in STATES)
        assert 0 < found["least"] < found["clipped_equilibrium"]
    assert abs(BOUND.bound(0.1)["least"] - 19 / 600) < 1e-9


@settings(max_examples=60, deadline=None)
@given(
    p_min=st.sampled_from((0.05, 0.1, 0.2)),
    raw=st.lists(st.floats(0.0, 1.0), min_size=12, max_size=12),
)
def test_no_floored_policy_is_less_exploitable_than_the_bound(
    p_min: float, raw: list[float]
) -> None:
    bets = {s: p_min + (1 - 2 * p_min) * u for s, u in zip(STATES, raw, strict=True)}
    found = kuhn_exploitability(BOUND.as_policy(bets))["exploitability"]
    assert found >= BOUND.bound(p_min)["least"] - 1e-9
