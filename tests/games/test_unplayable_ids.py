"""A game id that cannot be played (an unknown OpenSpiel or TextArena name, one-player,
general-sum or three-player games) is refused in one line when the command line is
read, before any model loads; any string given as a game id is either a playable game
or such a refusal."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spiral import games
from spiral.cli import main as cli_main
from spiral.engines.torch import loading
from spiral.errors import SpiralError
from spiral.evaluation.eval_args import parse_eval_args, validate

pytest.importorskip("pyspiel")
pytest.importorskip("textarena")

UNPLAYABLE = {
    "unknown OpenSpiel name": ("openspiel:no_such_game", "names no OpenSpiel game"),
    "unicode in the name": ("openspiel:tic_tac_töe", "did you mean tic_tac_toe"),
    "one player": ("openspiel:catch", "has 1 player;"),
    "not zero-sum": ("openspiel:first_sealed_auction", "not zero-sum"),
    "three players": ("openspiel:kuhn_poker(players=3)", "has 3 players"),
    "unknown TextArena id": ("textarena:NoSuchGame-v0", "names no TextArena env"),
    "TextArena, five players or more": ("textarena:SecretMafia-v0", "two players"),
}


@pytest.fixture
def no_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    def loaded(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model loaded before the game id was refused")

    monkeypatch.setattr(loading, "_load_causal_lm", loaded)


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("case", sorted(UNPLAYABLE))
def test_an_unplayable_game_stops_eval_before_the_model_loads(
    tiny_llama: Path, capsys: pytest.CaptureFixture[str], no_model_loads: None, case: str
) -> None:
    game_id, said = UNPLAYABLE[case]
    argv = ["eval", f"checkpoint={tiny_llama}", f"env_ids={game_id}", "opponents=random"]
    assert cli_main([*argv, "games=1"]) == 2
    err = _one_line(capsys)
    assert said in err and "env_ids" in err


@pytest.mark.parametrize("case", ["one player", "not zero-sum", "unknown TextArena id"])
def test_an_unplayable_game_stops_training_before_the_model_loads(
    tiny_llama: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    no_model_loads: None,
    case: str,
) -> None:
    game_id, said = UNPLAYABLE[case]
    argv = ["train", f"model_name={tiny_llama}", f"env_ids={game_id}", "max_steps=1"]
    assert cli_main([*argv, "lora_rank=4", "batch_size=2", f"log_path={tmp_path / 'r'}"]) == 2
    assert said in _one_line(capsys)
    assert not (tmp_path / "r").exists()


OPENSPIEL_NAMES = ["kuhn_poker", "leduc_poker", "tic_tac_toe", "catch", "goofspiel", "chess"]
GAME_IDS = st.one_of(
    st.sampled_from(games.ids()),
    st.builds(
        str.__add__,
        st.sampled_from(["openspiel:", "textarena:", "", "openspiel", "textarena:TicTacToe"]),
        st.text(max_size=16),
    ),
    st.builds(
        "openspiel:{}(players={})".format, st.sampled_from(OPENSPIEL_NAMES), st.integers(-1, 4)
    ),
    st.builds("openspiel:{}".format, st.sampled_from(OPENSPIEL_NAMES)),
    st.builds(
        "textarena:{}".format,
        st.sampled_from(["TicTacToe-v0", "Poker-v0", "SecretMafia-v0", "Chess-v0", "Nim-v0"]),
    ),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(game_id=GAME_IDS)
def test_any_game_id_is_a_playable_game_or_one_line(game_id: str) -> None:
    """Through the real parse and check of `spiral eval`: accepted ids make two-seat games
    with a seat to move; refused ones say so in one line (a SpiralError), never anything
    else."""
    try:
        a = parse_eval_args(["checkpoint=base", f"env_ids={game_id}", "opponents=random"])
        validate(a)
    except SpiralError as refused:
        said = str(refused)
        assert said and "\n" not in said, said
        return
    for accepted in a.env_ids:
        state = games.make(accepted, seed=0)
        assert not state.is_terminal() and state.current_player() in (0, 1)
