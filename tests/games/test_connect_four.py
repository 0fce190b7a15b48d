"""ConnectFour-v0 rules, move format and board text, on positions worked by hand."""

from __future__ import annotations

import random

import pytest

from spiral.games import IllegalMoveError, make
from spiral.games.connect_four import ConnectFour


def _play(cols: list[int]) -> ConnectFour:
    state = make("ConnectFour-v0", seed=0)
    assert isinstance(state, ConnectFour)
    for col in cols:
        state.apply_action(f"[col {col}]")
    return state


def test_vertical_four_wins() -> None:
    state = _play([0, 1, 0, 1, 0, 1, 0])
    assert state.is_terminal() and state.returns() == (1.0, -1.0)


def test_horizontal_four_wins() -> None:
    state = _play([0, 0, 1, 1, 2, 2, 3])
    assert state.is_terminal() and state.winner() == 0


def test_diagonal_four_wins() -> None:
    # X ends on (col, row-from-bottom) (0,0) (1,1) (2,2) (3,3); O never has four.
    cols = [0, 1, 1, 2, 2, 3, 2, 3, 3, 6]
    state = _play(cols)
    assert not state.is_terminal()
    state.apply_action("[col 3]")
    assert state.is_terminal() and state.winner() == 0


def test_player_one_can_win() -> None:
    state = _play([0, 1, 0, 1, 0, 1, 6, 1])
    assert state.returns() == (-1.0, 1.0)


def test_full_column_is_illegal() -> None:
    state = _play([0, 0, 0, 0, 0, 0])  # alternating discs: no four
    assert state.heights[0] == 6
    assert "[col 0]" not in state.legal_actions()
    with pytest.raises(IllegalMoveError):
        state.apply_action("[col 0]")
    with pytest.raises(IllegalMoveError):
        state.apply_action("[col 7]")


def test_move_format_is_col_n_and_tolerant() -> None:
    state = make("ConnectFour-v0", seed=0)
    assert state.legal_actions() == [f"[col {c}]" for c in range(7)]
    for text in ("[col 3]", "[COL 3]", "[ col 3 ]", "[col3]", "[3]", "  [Col 3]\n"):
        assert state.parse_action(text) == "[col 3]"
    assert state.parse_action("col 3") is None


def test_board_text_after_a_move() -> None:
    state = _play([3])
    obs = state.observation(1)
    assert obs.startswith("You are Player 1 in Connect Four.\n")
    expected = (
        "Board state:\n0 1 2 3 4 5 6\n-------------\n" + ". . . . . . .\n" * 5 + ". . . X . . .\n\n"
        "Available Moves: '[col 0]', '[col 1]', '[col 2]', '[col 3]', '[col 4]', '[col 5]', "
        "'[col 6]'\n\nNext Action:"
    )
    assert obs.endswith(expected)
    assert state.board[5][3] == 0 and state.board[4][3] == -1


def test_a_full_board_without_four_is_a_draw() -> None:
    for seed in range(3000):
        state = make("ConnectFour-v0", seed=seed)
        rng = random.Random(seed)
        while not state.is_terminal():
            state.apply_action(rng.choice(state.legal_actions()))
        if state.winner() is None:
            assert len(state.move_history) == 42
            assert state.returns() == (0.0, 0.0)
            assert "The game is a draw." in state.observation(0)
            return
    pytest.fail("no drawn game in 3000 random games (draws happen in a few percent)")
