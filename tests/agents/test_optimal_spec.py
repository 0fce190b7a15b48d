"""`optimal` and `optimal:<game>` in every command that takes opponents: a spec that names
another game than the one played, or a game without a scripted player, is refused in one
line before anything is loaded or played."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spiral.agents import make as make_agent
from spiral.agents.scripted import optimal_game_ids
from spiral.cli import main as cli_main
from spiral.errors import SpiralError
from spiral.evaluation.eval_args import parse_eval_args, validate
from spiral.train.config import parse_config
from spiral.train.setup import build_setup

GAMES = ["TicTacToe-v0", "KuhnPokerSingle-v0", "LeducPoker-v0", "LiarsDice-v1", "PigDice-v1"]
args = st.one_of(st.just(""), st.sampled_from(GAMES), st.text("abcLeduc-v0:", max_size=12))


def fine(arg: str, played: list[str]) -> bool:
    return all(g in optimal_game_ids() and arg in ("", g) for g in played)


@settings(max_examples=60, deadline=None)
@given(arg=args, played=st.lists(st.sampled_from(GAMES), min_size=1, max_size=2, unique=True))
def test_eval_and_train_refuse_what_cannot_play(arg: str, played: list[str]) -> None:
    spec = f"optimal:{arg}" if arg else "optimal"
    eval_args = parse_eval_args(
        ["checkpoint=base", f"env_ids={','.join(played)}", f"opponents={spec}"]
    )
    train = parse_config([f"env_ids={','.join(played)}", f"eval_opponent_names={spec}"])
    if fine(arg, played):
        validate(eval_args)
        build_setup(train)
        for game in played:  # and the player is made for each game
            assert make_agent(spec, game_id=game, seed=0).name
        return
    for check, value in ((validate, eval_args), (build_setup, train)):
        with pytest.raises(SpiralError) as err:
            check(value)  # type: ignore[operator]
        assert "\n" not in str(err.value) and "optimal" in str(err.value)


@pytest.mark.parametrize("spec", ["optimal:foo", "optimal:TicTacToe-v0", "optimal:leducpoker-v0"])
def test_play_refuses_a_spec_naming_another_game(
    spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["play", "game=LeducPoker-v0", f"opponent={spec}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "names another game than LeducPoker-v0" in err
