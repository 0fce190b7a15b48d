"""ConnectFour-v0: 7 columns x 6 rows, four in a row wins, TextArena's move format.

Choices:
- Moves are "[col N]" with N the 0-based column, as TextArena's ConnectFour-v0 asks for.
  `parse_action` also accepts "[N]" and any case/spacing ("[ COL 3 ]"), as TextArena's
  regex does.
- Player 0 drops 'X' and moves first; player 1 drops 'O' (TextArena's convention).
- Messages: the rules, then after every move the action (sender "Player k"), a description
  and the board. Unlike TextArena we append an "Available Moves: '[col 0]', ..." line to the
  board, so the "latest" observation style (the default, as for TicTacToe) shows the legal
  moves the way SPIRAL's TicTacToe prompts did.
- `board` exposes the grid (top row first, -1 empty, else a seat) for scripted players.
"""

from __future__ import annotations

import re

from spiral.games.base import ObsStyle, State
from spiral.games.registry import register
from spiral.types import Move, Seat

ROWS = 6
COLS = 7
EMPTY = -1
SYMBOLS = ("X", "O")
MOVES: tuple[Move, ...] = tuple(f"[col {c}]" for c in range(COLS))
# At most 4 digits: int() of a longer run is pointless here (7 columns) and Python refuses
# more than 4,300 digits with a ValueError; the parser must never raise.
_MOVE_RE = re.compile(r"\[\s*(?:col\s*)?(\d{1,4})\s*\]", re.IGNORECASE)
_DIRECTIONS = ((0, 1), (1, 0), (1, 1), (1, -1))


def _rules(seat: Seat) -> str:
    return (
        f"You are Player {seat} in Connect Four.\n"
        f"Your disc symbol: {SYMBOLS[seat]}. Your opponent's: {SYMBOLS[1 - seat]}.\n"
        f"The board has {ROWS} rows and {COLS} columns.\n"
        f"Players take turns dropping one disc into a column (0 to {COLS - 1}); it falls to "
        "the lowest empty row.\n"
        "The first to connect four of their own discs vertically, horizontally, or "
        "diagonally wins. A full board with no four in a row is a draw.\n"
        "On your turn, write the column in square brackets, for example '[col 3]'."
    )


class ConnectFour(State):
    """Connect Four on a 7x6 board; +1/-1 for four in a row, 0/0 for a full board."""

    game_id = "ConnectFour-v0"
    default_obs_style: ObsStyle = "latest"

    @classmethod
    def chance_outcomes(cls) -> tuple[dict[str, object], ...] | None:
        return ()  # no chance: nothing to balance

    def __init__(self, seed: int = 0, max_turns: int | None = None) -> None:
        super().__init__(seed=seed, max_turns=max_turns)
        # _grid[r][c], r = 0 is the top row (the order TextArena prints).
        self._grid: list[list[int]] = [[EMPTY] * COLS for _ in range(ROWS)]
        self._heights: list[int] = [0] * COLS  # discs in each column
        self._to_move: Seat = 0
        self._winner: Seat | None = None
        self._filled = 0
        for seat in (0, 1):
            self._tell(seat, _rules(seat))
        self._broadcast(self._board_message())

    # ---- read-only views for scripted players -------------------------------------
    @property
    def board(self) -> tuple[tuple[int, ...], ...]:
        """Rows from the top: -1 empty, else the seat whose disc is there."""
        return tuple(tuple(row) for row in self._grid)

    @property
    def heights(self) -> tuple[int, ...]:
        """Discs already in each column (6 means full)."""
        return tuple(self._heights)

    # ---- rules hooks ----------------------------------------------------------------
    def _current_player(self) -> Seat:
        return self._to_move

    def _legal_actions(self) -> list[Move]:
        return [MOVES[c] for c in range(COLS) if self._heights[c] < ROWS]

    def parse_action(self, text: str) -> Move | None:
        match = _MOVE_RE.fullmatch(text.strip())
        if match is None or self.is_terminal():
            return None
        col = int(match.group(1))
        if col >= COLS or self._heights[col] >= ROWS:
            return None
        return MOVES[col]

    def _apply(self, move: Move) -> None:
        col = int(move[5:-1])
        seat = self._to_move
        row = ROWS - 1 - self._heights[col]
        self._grid[row][col] = seat
        self._heights[col] += 1
        self._filled += 1
        self._broadcast(move, sender=f"Player {seat}")
        self._broadcast(f"Player {seat} dropped their disc ({SYMBOLS[seat]}) into column {col}.")
        if self._connects_four(row, col):
            self._winner = seat
        self._to_move = 1 - seat
        self._broadcast(self._board_message())

    def _connects_four(self, row: int, col: int) -> bool:
        seat = self._grid[row][col]
        for dr, dc in _DIRECTIONS:
            run = 1
            for sign in (1, -1):
                r, c = row + sign * dr, col + sign * dc
                while 0 <= r < ROWS and 0 <= c < COLS and self._grid[r][c] == seat:
                    run += 1
                    r += sign * dr
                    c += sign * dc
            if run >= 4:
                return True
        return False

    def _game_over(self) -> bool:
        return self._winner is not None or self._filled == ROWS * COLS

    def _returns(self) -> tuple[float, float]:
        if self._winner is None:
            return (0.0, 0.0)
        return (1.0, -1.0) if self._winner == 0 else (-1.0, 1.0)

    # ---- messages ---------------------------------------------------------------------
    def render_board(self) -> str:
        header = " ".join(str(c) for c in range(COLS))
        rows = "\n".join(
            " ".join("." if v == EMPTY else SYMBOLS[v] for v in row) for row in self._grid
        )
        return f"{header}\n{'-' * (2 * COLS - 1)}\n{rows}"

    def _board_message(self) -> str:
        board = f"Board state:\n{self.render_board()}"
        if self._winner is not None:
            return f"{board}\n\nPlayer {self._winner} wins by connecting four!"
        if self._filled == ROWS * COLS:
            return f"{board}\n\nThe board is full. The game is a draw."
        moves = ", ".join(f"'{m}'" for m in self._legal_actions())
        return f"{board}\n\nAvailable Moves: {moves}"


register(ConnectFour.game_id, ConnectFour)
