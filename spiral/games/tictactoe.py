"""TicTacToe-v0: 3x3 noughts and crosses with TextArena's conventions and message layout.

Choices:
- Player 0 is 'O' and moves first; player 1 is 'X' (TextArena's convention, which SPIRAL
  inherits). Moves are "[0]".."[8]", cells numbered row by row from the top left.
- Messages follow TextArena's TicTacToe as SPIRAL saw it: the rules first, then after every
  move the mover's action (sender "Player k"), a one-line description, and the board with
  an "Available Moves: '[0]', '[1]', ..." line. SPIRAL's move parser reads that line, so
  the default observation style is "latest" (rules + latest message), as its FirstLast
  wrapper rendered it.
- The board is a flat list of seats (-1 empty) so scripted players can read it without
  parsing text; `board` exposes it as a tuple.
"""

from __future__ import annotations

from spiral.games.base import ObsStyle, State, normalize_move_text
from spiral.games.registry import register
from spiral.types import Move, Seat

EMPTY = -1
SYMBOLS = ("O", "X")  # seat 0 plays 'O', seat 1 plays 'X'
MOVES: tuple[Move, ...] = tuple(f"[{cell}]" for cell in range(9))
LINES: tuple[tuple[int, int, int], ...] = (
    (0, 1, 2),
    (3, 4, 5),
    (6, 7, 8),
    (0, 3, 6),
    (1, 4, 7),
    (2, 5, 8),
    (0, 4, 8),
    (2, 4, 6),
)
# For each cell, the lines through it: a win can only be completed through the last move.
LINES_THROUGH: tuple[tuple[tuple[int, int, int], ...], ...] = tuple(
    tuple(line for line in LINES if cell in line) for cell in range(9)
)
_CELL_OF_TEXT = {normalize_move_text(move): cell for cell, move in enumerate(MOVES)}


def winner_of(board: tuple[int, ...] | list[int]) -> Seat | None:
    """The seat with three in a row on `board`, or None."""
    for a, b, c in LINES:
        if board[a] != EMPTY and board[a] == board[b] == board[c]:
            return board[a]
    return None


def render_board(board: tuple[int, ...] | list[int]) -> str:
    """Rows joined by '---+---+---'; empty cells show their number so moves are readable."""
    rows = []
    for r in range(3):
        cells = [board[3 * r + c] for c in range(3)]
        rows.append(
            "|".join(
                f" {SYMBOLS[v]} " if v != EMPTY else f" {3 * r + c} " for c, v in enumerate(cells)
            )
        )
    return "\n---+---+---\n".join(rows)


def _rules(seat: Seat) -> str:
    return (
        f"You are Player {seat} in Tic Tac Toe.\n"
        "Your goal is to get three of your marks in a row (horizontally, vertically, or "
        "diagonally) on the board.\n"
        "On your turn, select the number (0-8) of an empty square to place your mark there.\n"
        "For example, '[4]' places your mark in the center square of the board.\n\n"
        f"As Player {seat}, you are '{SYMBOLS[seat]}', "
        f"and your opponent is '{SYMBOLS[1 - seat]}'.\n"
    )


class TicTacToe(State):
    """Noughts and crosses; +1/-1 for three in a row, 0/0 for a full board."""

    game_id = "TicTacToe-v0"
    default_obs_style: ObsStyle = "latest"

    @classmethod
    def chance_outcomes(cls) -> tuple[dict[str, object], ...] | None:
        return ()  # no chance: nothing to balance

    def __init__(self, seed: int = 0, max_turns: int | None = None) -> None:
        super().__init__(seed=seed, max_turns=max_turns)
        self._board: list[int] = [EMPTY] * 9
        self._to_move: Seat = 0
        self._winner: Seat | None = None
        self._filled = 0
        for seat in (0, 1):
            self._tell(seat, _rules(seat))
        self._broadcast(self._board_message())

    # ---- read-only views for scripted players -------------------------------------
    @property
    def board(self) -> tuple[int, ...]:
        """Nine cells, row by row: -1 empty, else the seat whose mark is there."""
        return tuple(self._board)

    # ---- rules hooks ----------------------------------------------------------------
    def _current_player(self) -> Seat:
        return self._to_move

    def _legal_actions(self) -> list[Move]:
        return [MOVES[cell] for cell in range(9) if self._board[cell] == EMPTY]

    def parse_action(self, text: str) -> Move | None:
        # A dict lookup instead of the base class's scan: random playouts are benchmarked.
        cell = _CELL_OF_TEXT.get(normalize_move_text(text))
        if cell is None or self.is_terminal() or self._board[cell] != EMPTY:
            return None
        return MOVES[cell]

    def _apply(self, move: Move) -> None:
        cell = int(move[1:-1])
        seat = self._to_move
        self._board[cell] = seat
        self._filled += 1
        self._broadcast(move, sender=f"Player {seat}")
        self._broadcast(f"Player {seat} placed their symbol ({SYMBOLS[seat]}) in cell {cell}.")
        for a, b, c in LINES_THROUGH[cell]:
            if self._board[a] == self._board[b] == self._board[c]:
                self._winner = seat
                break
        self._to_move = 1 - seat
        self._broadcast(self._board_message())

    def _game_over(self) -> bool:
        return self._winner is not None or self._filled == 9

    def _returns(self) -> tuple[float, float]:
        if self._winner is None:
            return (0.0, 0.0)
        return (1.0, -1.0) if self._winner == 0 else (-1.0, 1.0)

    # ---- messages ---------------------------------------------------------------------
    def brief(self, seat: Seat) -> str | None:
        rows = (
            " ".join(SYMBOLS[v] if v != EMPTY else str(3 * r + c) for c, v in enumerate(row))
            for r, row in enumerate((self._board[0:3], self._board[3:6], self._board[6:9]))
        )
        return (
            f"Tic Tac Toe. You are {SYMBOLS[seat]}, your opponent {SYMBOLS[1 - seat]}; "
            "three in a row wins. Free cells show their number.\n" + "\n".join(rows)
        )

    def _board_message(self) -> str:
        board = f"Current Board:\n\n{render_board(self._board)}"
        if self._winner is not None:
            return f"{board}\n\nPlayer {self._winner} has won!"
        if self._filled == 9:
            return f"{board}\n\nThe game is a draw!"
        moves = ", ".join(f"'{m}'" for m in self._legal_actions())
        return f"{board}\n\nAvailable Moves: {moves}"


register(TicTacToe.game_id, TicTacToe)
