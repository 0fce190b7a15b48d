"""A person at the terminal as an agent, and `spiral play` built on it.

`spiral play game=TicTacToe-v0 opponent=optimal seat=0 seed=0` shows the person what their
seat sees (board or cards, and the legal moves), reads a move, and answers bad input with
a message instead of crashing. Moves may be typed with or without brackets, in any case;
in games whose moves are numbers (TicTacToe cells, Connect Four columns) a number is
that move; elsewhere it picks from the numbered list of legal moves (`numbered_moves`, one
rule per game). `quit` ends the game. Without `game=`, a checkpoint opponent brings the
first game its run trained on (`default_game`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TextIO

import chz

from spiral import games
from spiral.agents.base import Agent
from spiral.agents.registry import known_opponents
from spiral.agents.registry import make as make_agent
from spiral.args import (
    help_text,
    parse_command,
    seat_number,
    wants_help,
)
from spiral.games.base import State
from spiral.games.registry import known_game_ids
from spiral.types import Move


def _game_or_unset(obj: object, attr: str) -> None:
    if getattr(obj, attr):
        known_game_ids(obj, attr)


@chz.chz
class PlayArgs:
    """usage: spiral play game=<id> opponent=<random|optimal|checkpoint:PATH|api:MODEL>

    Play a game in the terminal. `spiral play --list` lists the games."""

    game: str = chz.field(
        default="",
        doc="the game id (default: a checkpoint opponent's first training game, else TicTacToe-v0)",
        validator=_game_or_unset,
    )
    opponent: str = chz.field(
        default="random",
        doc="random, optimal, checkpoint:PATH or api:MODEL",
        validator=known_opponents,
    )
    seat: int = chz.field(default=0, doc="your seat: 0 moves first", validator=seat_number)
    seed: int = chz.field(default=0, doc="seed for the deal and the opponent's sampling")


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
        if numbered_moves(legal):
            self.out("Legal moves: " + "  ".join(legal[:40]))
            hint = "Type one of the moves above (a number is that move, e.g. 4)."
        else:
            self.out("Legal moves: " + "  ".join(f"{i + 1}) {m}" for i, m in enumerate(legal[:40])))
            hint = "Type one of the moves above, or its number in the list."
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
            self.out(f"'{text}' is not a legal move here. {hint}")

    @staticmethod
    def _interpret(text: str, state: State, legal: Sequence[Move]) -> Move | None:
        """One rule per game, never per position: where moves are numbers (a TicTacToe
        cell, a Connect Four column) a number is that move, legal or not; elsewhere a
        number picks from the numbered list."""
        if text.isdigit() and not numbered_moves(legal):
            return legal[int(text) - 1] if 1 <= int(text) <= len(legal) else None
        for candidate in (text, f"[{text}]"):
            move = state.parse_action(candidate)
            if move is not None:
                return move
        return None


def numbered_moves(legal: Sequence[Move]) -> bool:
    """Whether this game's moves are numbers (`[4]`): then a typed number names a move."""
    return any(m.strip("[]").isdigit() for m in legal)


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


def default_game(opponent: str) -> str:
    """The game to play when none is given: a checkpoint's run's first game (said on the
    terminal), else TicTacToe-v0."""
    prefix, _, arg = opponent.partition(":")
    if prefix == "checkpoint":
        from spiral.agents.model_agent import resolve_source

        trained = resolve_source(arg).config.get("env_ids") or []
        if trained and trained[0] in games.ids():
            print(f"playing {trained[0]}, the game the checkpoint trained on (game= changes it)")
            return str(trained[0])
    return "TicTacToe-v0"


def main(argv: Sequence[str]) -> int:
    if wants_help(argv):
        print(help_text(PlayArgs, "play"))
        return 0
    if "--list" in argv:
        print("\n".join(games.ids()))
        return 0
    args = parse_command(PlayArgs, argv, "play")
    game = args.game or default_game(args.opponent)
    opponent = make_agent(args.opponent, game_id=game, seed=args.seed + 1)
    try:
        play(game, opponent, HumanAgent(), args.seat, args.seed)
    except QuitGame:
        print("Bye.")
    return 0
