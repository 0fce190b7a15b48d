"""Game ids whose parameters hold commas, games Spiral cannot play found when the command
line is read (no move list, not zero-sum), a model config without a context, an empty
SPIRAL_CACHE, and help written to a full device."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spiral.args import comma_list
from spiral.engines.embedded import default_cache_dir
from spiral.engines.torch.sampler_rows import ContextLengthError, model_context
from spiral.games import registry
from spiral.train.config import parse_config

NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-:0123456789", min_size=1, max_size=12)
PARAMS = st.lists(st.tuples(NAME, st.integers(0, 9)), max_size=3).map(
    lambda kv: "" if not kv else "(" + ",".join(f"{k}={v}" for k, v in kv) + ")"
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(NAME, PARAMS).map("".join), min_size=1, max_size=4))
def test_a_list_of_ids_splits_at_commas_outside_parentheses(ids: list[str]) -> None:
    assert comma_list(",".join(ids)) == tuple(ids)
    assert comma_list(",," + ", ".join(ids) + ",") == tuple(ids)


def test_a_game_id_with_several_parameters_reaches_the_config() -> None:
    pytest.importorskip("pyspiel")
    config = parse_config(["env_ids=openspiel:liars_dice(numdice=1,players=2),KuhnPokerSingle-v0"])
    assert config.env_ids == ("openspiel:liars_dice(numdice=1,players=2)", "KuhnPokerSingle-v0")


def test_a_game_that_is_not_zero_sum_is_refused_when_read() -> None:
    pytest.importorskip("pyspiel")
    for game in ("openspiel:hanabi", "openspiel:first_sealed_auction"):
        problem = registry.unplayable(game)
        assert problem is not None and "not zero-sum" in problem, game
    assert registry.unplayable("openspiel:tic_tac_toe") is None


def test_a_textarena_game_that_lists_no_moves_is_played_free_form() -> None:
    pytest.importorskip("textarena")
    assert registry.unplayable("textarena:ConnectFour-v0") is None
    assert registry.takes_free_moves("textarena:ConnectFour-v0")
    assert not registry.takes_free_moves("textarena:TicTacToe-v0")


@pytest.mark.parametrize("value", [0, -1])
def test_a_config_without_a_context_is_refused(value: int) -> None:
    model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=value))
    with pytest.raises(ContextLengthError, match="max_position_embeddings"):
        model_context(model)
    assert model_context(SimpleNamespace(config=SimpleNamespace())) is None


def test_an_empty_spiral_cache_is_the_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SPIRAL_CACHE", "")
    assert default_cache_dir() == tmp_path / ".cache" / "spiral"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("command", ["eval", "train", "serve"])
def test_help_written_to_a_full_device_is_one_line(command: str) -> None:
    if importlib.util.find_spec("fastapi") is None and command == "serve":
        pytest.skip("serve needs the serve extra")
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "spiral.cli", command, "--help"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "full" in lines[0], done.stderr
