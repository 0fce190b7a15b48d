"""The snapshot magnet's rules: every N steps, or once the policy has settled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spiral.errors import UsageError
from spiral.report.sinks import read_jsonl
from spiral.train.config import parse_config
from spiral.train.loop import train
from spiral.train.magnet import MIN_AGE, settled
from spiral.train.setup import build_setup, make_learner_factory

from .test_e2e import tiny_args, tiny_model  # noqa: F401  (fixture)


def test_settled_worked_by_hand() -> None:
    # A fresh magnet's KL growing as fast as it did is never settled (tolerance < 1).
    assert not settled([0.0, 0.01], 0.5)
    assert not settled([0.0, 0.01, 0.02, 0.03], 0.99)
    # Flattened: changes 0.05, 0.04, 0.001: the last is 2% of the largest.
    kls = [0.0, 0.05, 0.09, 0.091]
    assert settled(kls, 0.05) and not settled(kls, 0.01)
    assert not settled([0.0, 0.0, 0.0], 0.5)  # no KL at all: nothing to settle on


@given(
    reference=st.sampled_from(["reference", "uniform", "snapshot"]),
    interval=st.integers(0, 50),
    settle=st.floats(0.0, 0.99),
    kl=st.sampled_from(["0", "0.2", "0->0.6", "0.5->0"]),
)
def test_magnet_keys_that_would_do_nothing_are_refused(
    reference: str, interval: int, settle: float, kl: str
) -> None:
    """A rule given to a magnet that does not move, or a snapshot magnet with no pull, is
    refused in one line; whatever is accepted moves a magnet that pulls."""
    words = [f"kl_reference={reference}", f"kl_magnet_interval={interval}"]
    words += [f"kl_magnet_settle={settle}", f"kl_coef={kl}", "model_name=/nonexistent"]
    try:
        cfg = parse_config([*words, "log_path=/nonexistent/run"])
    except UsageError as err:
        assert "\n" not in str(err)
        return
    reg = cfg.regularizer
    moves = reg.kl_magnet_interval > 0 or reg.kl_magnet_settle > 0
    assert moves == (reference == "snapshot")
    assert reference != "snapshot" or not reg.kl_coef.is_off


@given(st.lists(st.floats(0.0, 10.0), max_size=40), st.floats(0.0, 0.99))
def test_settled_needs_a_magnet_of_age_and_a_small_last_change(
    kls: list[float], tolerance: float
) -> None:
    if settled(kls, tolerance):
        changes = [abs(b - a) for a, b in zip(kls, kls[1:], strict=False)]
        assert len(kls) >= MIN_AGE and max(changes) > 0
        assert changes[-1] <= tolerance * max(changes)


def test_a_magnet_needs_a_rule(tiny_model: Path, tmp_path: Path) -> None:  # noqa: F811
    args = [*tiny_args(tiny_model, tmp_path / "run", 2), "kl_reference=snapshot", "kl_coef=0.5"]
    with pytest.raises(UsageError, match="kl_magnet_interval > 0 .* or kl_magnet_settle > 0"):
        parse_config([*args, "kl_magnet_interval=0"])
    with pytest.raises(UsageError, match="below 1"):
        parse_config([*args, "kl_magnet_settle=1.5"])
    with pytest.raises(UsageError, match="pulls nothing: set kl_coef"):
        parse_config([*args, "kl_coef=0", "kl_magnet_interval=5"])
    plain = [*tiny_args(tiny_model, tmp_path / "run", 2), "kl_coef=0.5"]
    with pytest.raises(UsageError, match="set kl_reference=snapshot, or leave both at 0"):
        parse_config([*plain, "kl_magnet_settle=0.1"])


def test_the_settle_rule_moves_the_magnet_and_resumes_exactly(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """With the settle rule alone, the magnet moves when the KL to it flattens; a run
    stopped and resumed moves it at the same steps (its record travels with the
    checkpoint) and logs the same KL at every step."""

    def run(folder: Path, steps: int) -> list[dict]:
        args = tiny_args(tiny_model, folder, steps, envs="KuhnPokerSingle-v0")
        keys = (
            "answer_format=constrained",
            "rollout=full_width",
            "kl_reference=snapshot",
            "kl_magnet_interval=0",
            "kl_magnet_settle=0.9",
            "kl_coef=0.5",
            "eval_every=0",
            "save_every=3",
        )
        cfg = parse_config([*args, *keys])
        train(cfg, build_setup(cfg), make_learner_factory(cfg), log=lambda _: None)
        return read_jsonl(folder / "metrics.jsonl")

    straight = run(tmp_path / "straight", 9)
    kls = [r["train/kl_to_magnet"] for r in straight]
    refreshed = [i for i in range(1, len(kls)) if kls[i] < 1e-6]  # a fresh magnet: KL 0
    assert refreshed, kls  # the magnet moved after step 0 by the settle rule alone
    run(tmp_path / "resumed", 6)
    record = tmp_path / "resumed" / "checkpoints" / "step_000006" / "learner" / "magnet"
    assert "kls" in json.loads((record / "settle.json").read_text())
    resumed = run(tmp_path / "resumed", 9)
    assert [r["train/kl_to_magnet"] for r in resumed] == pytest.approx(kls, abs=1e-9)
