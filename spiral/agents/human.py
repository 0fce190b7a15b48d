"""A person at the terminal as an agent, and `spiral play` built on it.

`spiral play game=TicTacToe-v0 opponent=optimal seat=0 seed=0` shows the person what their
seat sees (board or cards, and the legal moves), reads a move, and answers bad input with
a message instead of crashing. Moves may be typed with or without brackets, in any case;
a number picks from the numbered list of legal moves. `quit` ends the game.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from spiral import games
from spiral.agents.base import Agent
from spiral.agents.registry import make as make_agent
from spiral.args import parse_key_values
from spiral.games.base import State
from spiral.types import Move

USAGE = (
    "usage: spiral play game=<id> opponent=<random|optimal|checkpoint:PATH|api:MODEL> "
    "[seat=0|1] [seed=N]\n`spiral play --list` lists the games."
)


class QuitGame(Exception):
    """The person typed quit."""


class HumanAgent(Agent):
    """Reads moves from `stdin`; re-asks until the input names a legal move."""

    name = "human"

    def __init__(self, stdin: TextIO | None = None, out: Callable[[str], None] = print) -> None:
        self.stdin = stdin or sys.stdin
        self.out = out

    def act(self, state: State) -> Move:
        seat = state.current_player()
        legal = state.legal_actions()
        self.out("\n" + "=" * 60 + f"\nYou are Player {seat}.\n" + state.observation(seat))
        self.out("Legal moves: " + "  ".join(f"{i + 1}) {m}" for i, m in enumerate(legal[:40])))
        while True:
            self.out("Your move> ")
            line = self.stdin.readline()
            if not line:
                raise QuitGame("input closed")
            text = line.strip()
            if text.lower() in ("quit", "exit", "q"):
                raise QuitGame("quit")
            move = self._interpret(text, state, legal)
            if move is not None:
                return move
            self.out(
                f"'{text}' is not a legal move here. Type one of the moves above, or its number."
            )

    @staticmethod
    def _interpret(text: str, state: State, legal: Sequence[Move]) -> Move | None:
        if text.isdigit() and 1 <= int(text) <= len(legal) and not state.parse_action(f"[{text}]"):
            return legal[int(text) - 1]
        for candidate in (text, f"[{text}]"):
            move = state.parse_action(candidate)
            if move is not None:
                return move
        return None


def play(
    game_id: str,
    opponent: Agent,
    human: Agent,
    seat: int,
    seed: int,
    out: Callable[[str], None] = print,
) -> tuple[float, float]:
    """Play one game between `human` (in `seat`) and `opponent`; returns the returns."""
    state = games.make(game_id, seed=seed)
    players = {seat: human, 1 - seat: opponent}
    while not state.is_terminal():
        mover = state.current_player()
        move = players[mover].act(state.clone())
        if mover != seat:
            out(f"Player {mover} ({opponent.name}) plays {move}")
        state.apply_action(move)
    out("\n" + state.observation(seat))
    r = state.returns()
    verdict = (
        "draw" if r[seat] == r[1 - seat] else ("you win" if r[seat] > r[1 - seat] else "you lose")
    )
    out(f"Game over: {verdict} (returns {r[0]:+g} / {r[1]:+g}).")
    return r


def main(argv: Sequence[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(USAGE)
        return 0
    if "--list" in argv:
        print("\n".join(games.ids()))
        return 0
    args = parse_key_values(argv, ("game", "opponent", "seat", "seed"))
    game_id = args.get("game", "TicTacToe-v0")
    try:
        seat, seed = int(args.get("seat", "0")), int(args.get("seed", "0"))
        if seat not in (0, 1):
            raise ValueError("seat must be 0 or 1")
        games.make(game_id)
        opponent = make_agent(args.get("opponent", "random"), game_id=game_id, seed=seed + 1)
    except (KeyError, ValueError) as err:
        print(f"spiral play: {err}\n{USAGE}", file=sys.stderr)
        return 2
    try:
        play(game_id, opponent, HumanAgent(), seat, seed)
    except QuitGame:
        print("Bye.")
    return 0
