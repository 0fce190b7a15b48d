"""A Connect Four player: depth-limited negamax alpha-beta on bitboards, random tie-breaks.

Choices:
- Bitboards in the usual 7-bits-per-column layout (bit = col * 7 + row from the bottom;
  the 7th bit of each column is an always-empty sentinel), so four-in-a-row and the window
  counts below are a few shifts and ANDs instead of Python loops over cells.
- `depth` counts plies including the move being chosen (default 4). Wins score
  WIN + remaining depth, so nearer wins are preferred and farther losses postponed.
- Heuristic at the horizon, for the side to move: +5 per open three (a four-cell window
  with three own discs and one empty cell), +2 per open two, -5/-2 for the opponent's,
  +3 per own disc in the centre column, -3 per opponent disc there.
- Ties are broken uniformly at random among the root moves of equal score. To know every
  tied move exactly, later root children are searched with alpha = best - 1: a child
  scoring >= best gets its exact value, a worse one only a bound below best.
"""

from __future__ import annotations

import random

from spiral.agents.base import Agent
from spiral.games.base import State
from spiral.games.connect_four import COLS, EMPTY, MOVES, ROWS, ConnectFour
from spiral.types import Move

_H = ROWS + 1  # bits per column (one sentinel)
_FULL = sum(1 << (c * _H + r) for c in range(COLS) for r in range(ROWS))
_CENTRE = sum(1 << (3 * _H + r) for r in range(ROWS))
_DIRECTIONS = (1, _H, _H - 1, _H + 1)  # vertical, horizontal, two diagonals
_ORDER = (3, 2, 4, 1, 5, 0, 6)  # centre first: better alpha-beta cut-offs
WIN = 1_000_000
_INF = 10**9


def wins(bits: int) -> bool:
    """True if `bits` holds four in a row in any direction."""
    for d in _DIRECTIONS:
        pairs = bits & (bits >> d)
        if pairs & (pairs >> 2 * d):
            return True
    return False


def _window_counts(own: int, empty: int) -> tuple[int, int]:
    """(open threes, open twos) of `own`: windows with no opponent disc and 3 (or 2) own."""
    free = own | empty
    threes = twos = 0
    for d in _DIRECTIONS:
        valid = free & (free >> d) & (free >> 2 * d) & (free >> 3 * d)
        if not valid:
            continue
        p0, p1, p2, p3 = own, own >> d, own >> 2 * d, own >> 3 * d
        at_least_3 = (p0 & p1 & (p2 | p3)) | ((p0 | p1) & p2 & p3)
        at_least_2 = (p0 & (p1 | p2 | p3)) | (p1 & (p2 | p3)) | (p2 & p3)
        n3 = (valid & at_least_3).bit_count()
        threes += n3
        twos += (valid & at_least_2).bit_count() - n3
    return threes, twos


def heuristic(me: int, opp: int) -> int:
    """Static score of a position for the side to move (`me`)."""
    empty = _FULL & ~(me | opp)
    my3, my2 = _window_counts(me, empty)
    op3, op2 = _window_counts(opp, empty)
    centre = (me & _CENTRE).bit_count() - (opp & _CENTRE).bit_count()
    return 5 * (my3 - op3) + 2 * (my2 - op2) + 3 * centre


def negamax(me: int, opp: int, heights: list[int], depth: int, alpha: int, beta: int) -> int:
    """Fail-soft alpha-beta value for the side to move (`me`), `depth` plies deep."""
    if depth == 0:
        return heuristic(me, opp)
    best = -_INF
    for col in _ORDER:
        row = heights[col]
        if row >= ROWS:
            continue
        after = me | (1 << (col * _H + row))
        if wins(after):
            return WIN + depth  # nothing beats winning now
        heights[col] += 1
        score = -negamax(opp, after, heights, depth - 1, -beta, -alpha)
        heights[col] -= 1
        if score > best:
            best = score
            if best > alpha:
                alpha = best
                if alpha >= beta:
                    break
    return 0 if best == -_INF else best  # no move left: a full board is a draw


def root_scores(me: int, opp: int, heights: list[int], depth: int) -> dict[int, int]:
    """Column -> score; exact for every column that ties the best, a bound for the rest."""
    if depth < 1:
        raise ValueError(f"search depth must be >= 1, got {depth}")
    scores: dict[int, int] = {}
    best = -_INF
    for col in _ORDER:
        row = heights[col]
        if row >= ROWS:
            continue
        after = me | (1 << (col * _H + row))
        if wins(after):
            score = WIN + depth
        else:
            heights[col] += 1
            score = -negamax(opp, after, heights, depth - 1, -_INF, -(best - 1))
            heights[col] -= 1
        scores[col] = score
        best = max(best, score)
    return scores


def bitboards(state: ConnectFour) -> tuple[int, int, list[int]]:
    """(side to move's discs, opponent's discs, column heights) of a Connect Four state."""
    me_seat = state.current_player()
    me = opp = 0
    for r, row in enumerate(state.board):
        height = ROWS - 1 - r  # the board's rows run from the top
        for c, seat in enumerate(row):
            if seat == EMPTY:
                continue
            bit = 1 << (c * _H + height)
            if seat == me_seat:
                me |= bit
            else:
                opp |= bit
    return me, opp, list(state.heights)


class ConnectFourSearch(Agent):
    """Alpha-beta to a fixed depth with a window-count heuristic."""

    name = "connect_four_search"

    def __init__(self, depth: int = 4, seed: int = 0) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self.depth = depth
        self.rng = random.Random(seed)

    def act(self, state: State) -> Move:
        if not isinstance(state, ConnectFour):
            raise TypeError(f"ConnectFourSearch plays ConnectFour-v0 only, got {state.game_id!r}")
        if state.is_terminal():
            raise ValueError("the game is over: no move to choose")
        me, opp, heights = bitboards(state)
        scores = root_scores(me, opp, heights, self.depth)
        top = max(scores.values())
        tied = sorted(col for col, s in scores.items() if s == top)
        return MOVES[self.rng.choice(tied)]


def make_connect_four_search(seed: int = 0, depth: int = 4) -> Agent:
    """Factory registered as the `optimal` player for ConnectFour-v0."""
    return ConnectFourSearch(depth=depth, seed=seed)
