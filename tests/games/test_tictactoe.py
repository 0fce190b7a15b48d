"""TicTacToe-v0 rules and messages, on games worked by hand."""

from __future__ import annotations

import pytest

from spiral.games import IllegalMoveError, make
from spiral.games.tictactoe import TicTacToe, render_board, winner_of


def _play(moves: list[int]) -> TicTacToe:
    state = make("TicTacToe-v0", seed=0)
    assert isinstance(state, TicTacToe)
    for cell in moves:
        state.apply_action(f"[{cell}]")
    return state


def test_player_zero_is_o_and_moves_first() -> None:
    state = _play([4])
    assert state.board[4] == 0
    assert state.current_player() == 1
    assert " O " in render_board(state.board)


def test_top_row_wins_for_player_zero() -> None:
    state = _play([0, 3, 1, 4, 2])  # O: 0 1 2, X: 3 4
    assert state.is_terminal() and state.returns() == (1.0, -1.0) and state.winner() == 0


def test_middle_row_wins_for_player_one() -> None:
    state = _play([0, 3, 1, 4, 8, 5])  # X: 3 4 5
    assert state.returns() == (-1.0, 1.0) and state.winner() == 1


def test_full_board_without_a_line_is_a_draw() -> None:
    # O X O / O X X / X O O: no three in a row
    state = _play([0, 1, 2, 4, 3, 5, 7, 6, 8])
    assert winner_of(state.board) is None
    assert state.is_terminal() and state.returns() == (0.0, 0.0) and state.winner() is None
    assert state.observation(0).endswith("The game is a draw!\n\nNext Action:")


def test_occupied_cell_is_illegal() -> None:
    state = _play([4])
    assert "[4]" not in state.legal_actions()
    with pytest.raises(IllegalMoveError):
        state.apply_action("[4]")
    with pytest.raises(IllegalMoveError):
        state.apply_action("[9]")


def test_latest_observation_is_rules_then_board_with_available_moves() -> None:
    state = _play([4])
    obs = state.observation(1)  # default style for TicTacToe is "latest"
    assert obs.startswith("You are Player 1 in Tic Tac Toe.\n")
    assert "you are 'X', and your opponent is 'O'" in obs
    expected_board = " 0 | 1 | 2 \n---+---+---\n 3 | O | 5 \n---+---+---\n 6 | 7 | 8 "
    assert (
        f"Current Board:\n\n{expected_board}\n\n"
        "Available Moves: '[0]', '[1]', '[2]', '[3]', '[5]', '[6]', '[7]', '[8]'"
        "\n\nNext Action:"
    ) in obs
    assert obs.endswith("'[8]'\n\nNext Action:")
    assert "placed their symbol" not in obs  # only the first and the latest message


def test_history_observation_lists_every_message() -> None:
    state = _play([4, 0])
    obs = state.observation(0, "history")
    assert obs.startswith("[GAME] You are Player 0 in Tic Tac Toe.")
    assert "\n[Player 0] [4]\n[GAME] Player 0 placed their symbol (O) in cell 4." in obs
    assert "\n[Player 1] [0]\n[GAME] Player 1 placed their symbol (X) in cell 0." in obs
    assert obs.endswith("Available Moves: '[1]', '[2]', '[3]', '[5]', '[6]', '[7]', '[8]'")
