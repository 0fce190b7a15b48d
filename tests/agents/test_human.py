"""`spiral play`: a person's moves from a text stream, bad input answered, not a crash."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from spiral.agents import make as make_agent
from spiral.agents.human import HumanAgent, QuitGame, play


def test_bad_input_is_answered_then_a_legal_move_is_taken() -> None:
    lines: list[str] = []
    # A word that is no move, an occupied cell, then cells without brackets until one is free.
    stdin = io.StringIO("banana\n[4]\n4\n0\n1\n2\n3\n5\n6\n7\n8\n")
    human = HumanAgent(stdin=stdin, out=lines.append)
    returns = play(
        "TicTacToe-v0",
        make_agent("optimal", game_id="TicTacToe-v0", seed=0),
        human,
        seat=1,
        seed=0,
        out=lines.append,
    )
    text = "\n".join(lines)
    assert "'banana' is not a legal move here" in text
    assert "Legal moves:" in text and "Game over:" in text
    assert returns[0] == -returns[1]


def test_numbered_choice_and_case_insensitive_words() -> None:
    from spiral import games

    state = games.make("KuhnPokerSingle-v0", seed=0)
    human = HumanAgent(stdin=io.StringIO("BET\n"), out=lambda _: None)
    assert human.act(state) == "[bet]"
    human = HumanAgent(stdin=io.StringIO("1\n"), out=lambda _: None)
    assert human.act(state) == state.legal_actions()[0]


def test_a_taken_cell_is_refused_not_read_as_a_menu_pick() -> None:
    from spiral import games

    state = games.make("TicTacToe-v0", seed=0)
    state.apply_action("[4]")
    lines: list[str] = []
    human = HumanAgent(stdin=io.StringIO("4\n5\n"), out=lines.append)
    assert human.act(state) == "[5]"  # "4" refused (taken), not read as the 4th legal move
    assert "'4' is not a legal move here" in "\n".join(lines)
    human = HumanAgent(stdin=io.StringIO("4\n"), out=lambda _: None)
    state.apply_action("[0]")
    with pytest.raises(QuitGame):  # 4 is taken; input ends without a legal move
        human.act(state)


def test_cli_play_runs_in_a_terminal_session() -> None:
    moves = "".join(f"{i}\n" for i in range(9)) * 2
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "spiral.cli",
            "play",
            "game=TicTacToe-v0",
            "opponent=random",
            "seat=0",
        ],
        input=moves,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Game over:" in proc.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "spiral.cli", "play", "game=Chess-v9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "is not a registered game" in bad.stderr


def test_a_checkpoint_opponent_brings_its_game(tmp_path: Path) -> None:
    """`spiral play opponent=checkpoint:RUN` plays the game the run trained on, and says so."""
    from spiral.agents.human import default_game

    run = tmp_path / "run"
    folder = run / "checkpoints" / "step_000002"
    (folder / "learner").mkdir(parents=True)
    (folder / "learner" / "adapter_config.json").write_text("{}")  # read, not loaded, here
    (folder / "loop_state.json").write_text(
        '{"step": 2, "config": {"env_ids": ["KuhnPokerSingle-v0"]}}'
    )
    (folder / "COMPLETE").write_text("")
    assert default_game(f"checkpoint:{folder}") == "KuhnPokerSingle-v0"
    assert default_game("random") == "TicTacToe-v0"
