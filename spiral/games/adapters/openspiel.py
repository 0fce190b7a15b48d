"""Any two-player, turn-based OpenSpiel game as a Spiral State (`openspiel:<name>` ids).

Choices:
- A move is `[<action_to_string>]` for the seat to move, e.g. `[x(1,1)]` in tic_tac_toe or
  `[Bet]` in kuhn_poker (brackets inside the text become parentheses). Should two legal
  actions print the same, every colliding move gets
  its action id appended (`[<text> #<id>]`) so canonical strings stay unique per state.
- Chance nodes are resolved inside the state, at once, by sampling `chance_outcomes()`
  with `self.rng`, so the same seed deals the same cards; chance outcomes are never told.
- What a seat is told after every move: the move (as `[Player k] [move]`; in an
  imperfect-information game only the mover is told it, since moves may be hidden, as in
  phantom_ttt or dark_hex, and the other seat's view says what it may know), then its own
  view: the information-state string where the game provides one, else the observation
  string (always the observation string, e.g. the board, in perfect-information games),
  and for the seat to move an `Available Moves:` line. Default style is "latest":
  OpenSpiel's per-seat strings already summarise the past.
- `private_info(seat)` is the seat's whole information-state string for imperfect-
  information games (coarse but exact: the observation is a function of it) and () for
  perfect-information games.
- Returns are OpenSpiel's own (e.g. +-2 after a called bet in Kuhn poker), not clipped to
  +-1: they are the game's payoffs. Games for other than two players are refused.
- A simultaneous-move game (goofspiel, matrix games) is played through OpenSpiel's
  turn-based wrapper: the seats move one after the other, and neither view shows the
  other's move until both are in (moves of imperfect-information games are not broadcast).
- Parameters ride in the id with OpenSpiel's own syntax: `openspiel:liars_dice(numdice=2)`.
- pyspiel is imported lazily, so this module loads without OpenSpiel installed and only
  `make` fails, with the install command.
"""

from __future__ import annotations

import copy
import difflib
import importlib
from typing import Any

from spiral.errors import UsageError
from spiral.games.adapters import UnknownGameError, first_line
from spiral.games.base import State
from spiral.types import Move, Seat

INSTALL_HINT = "pip install 'spiral-selfplay[openspiel]'"
TURN_BASED = "turn_based_simultaneous_game"


def _pyspiel() -> Any:
    try:
        return importlib.import_module("pyspiel")
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            f"the OpenSpiel adapter needs the open-spiel package: {INSTALL_HINT}"
        ) from err


class OpenSpielState(State):
    """A pyspiel state behind the Spiral State surface; see the module docstring."""

    default_obs_style = "latest"

    def __init__(self, game: Any, name: str, seed: int = 0, max_turns: int | None = None):
        super().__init__(seed=seed, max_turns=max_turns)
        self.game_id = f"openspiel:{name}"
        self._game = game
        game_type = game.get_type()
        perfect = _pyspiel().GameType.Information.PERFECT_INFORMATION
        self._perfect_info = game_type.information == perfect
        # A board (observation string) reads better than an action list for perfect-
        # information games; elsewhere the information state is what the seat knows.
        self._use_infostate = bool(game_type.provides_information_state_string) and not (
            self._perfect_info and game_type.provides_observation_string
        )
        self._ps = game.new_initial_state()
        self._resolve_chance()
        for seat in (0, 1):
            self._tell(seat, self._rules(seat, game_type))
        self._tell_views()

    # ---- rules hooks -------------------------------------------------------------
    def _current_player(self) -> Seat:
        return int(self._ps.current_player())

    def _legal_actions(self) -> list[Move]:
        return list(self._action_map())

    def _apply(self, move: Move) -> None:
        seat, _ = self.move_history[-1]
        action = self._action_map()[move]
        self._ps.apply_action(action)
        self._resolve_chance()
        if self._perfect_info:
            self._broadcast(move, sender=f"Player {seat}")
        else:  # a move may be hidden (phantom_ttt, dark_hex): the other seat's view says
            self._tell(seat, move, sender=f"Player {seat}")  # what it may know of it
        self._tell_views()

    def _game_over(self) -> bool:
        return bool(self._ps.is_terminal())

    def _returns(self) -> tuple[float, float]:
        r0, r1 = self._ps.returns()
        return (float(r0), float(r1))

    def private_info(self, seat: Seat) -> tuple[object, ...]:
        return () if self._perfect_info else (self._view(seat),)

    def clone(self) -> OpenSpielState:
        return copy.deepcopy(self)  # the game's whole state is OpenSpiel's: see below

    def __deepcopy__(self, memo: dict[int, Any]) -> OpenSpielState:
        # pyspiel states copy with .clone(); the game object is immutable and shared.
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            if key == "_ps":
                new.__dict__[key] = value.clone()
            elif key == "_game":
                new.__dict__[key] = value
            else:
                new.__dict__[key] = copy.deepcopy(value, memo)
        return new

    # ---- helpers -----------------------------------------------------------------
    def _action_map(self) -> dict[Move, int]:
        """Canonical move string -> OpenSpiel action id, for the seat to move."""
        player = self._ps.current_player()
        actions = list(self._ps.legal_actions())
        # Brackets inside an action's text ("[P0]Bid: 1") would nest in the move's own.
        texts = [
            self._ps.action_to_string(player, a).replace("[", "(").replace("]", ")")
            for a in actions
        ]
        clashes = {t for t in texts if texts.count(t) > 1}
        return {
            (f"[{t} #{a}]" if t in clashes else f"[{t}]"): a
            for t, a in zip(texts, actions, strict=True)
        }

    def _resolve_chance(self) -> None:
        while self._ps.is_chance_node():
            outcomes = self._ps.chance_outcomes()
            actions = [a for a, _ in outcomes]
            weights = [p for _, p in outcomes]
            self._ps.apply_action(self.rng.choices(actions, weights=weights)[0])

    def _view(self, seat: Seat) -> str:
        if self._use_infostate:
            return str(self._ps.information_state_string(seat))
        return str(self._ps.observation_string(seat))

    def _tell_views(self) -> None:
        if self._ps.is_terminal():
            r0, r1 = self._returns()
            self._broadcast(f"The game is over. Returns: Player 0: {r0:g}, Player 1: {r1:g}.")
            return
        mover = self._current_player()
        for seat in (0, 1):
            text = f"Your view of the game:\n{self._view(seat)}"
            if seat == mover:
                moves = ", ".join(f"'{m}'" for m in self._action_map())
                text += f"\nAvailable Moves: {moves}"
            self._tell(seat, text)

    def _rules(self, seat: Seat, game_type: Any) -> str:
        title = f"{game_type.long_name} (OpenSpiel '{game_type.short_name}')"
        if game_type.short_name == TURN_BASED:
            inner = str(self._game).partition("game=")[2].partition("(")[0]
            title = (
                f"OpenSpiel's '{inner}', a game of simultaneous moves taken here in turn: "
                "neither player sees the other's move before both have moved"
            )
        return (
            f"You are Player {seat} in the two-player game {title}.\nOn your turn, answer with "
            "exactly one of the Available Moves, written as listed, e.g. '[move]'. You only "
            "see your own view of the game."
        )


def _label(name: str) -> str:
    return repr(f"openspiel:{name}")  # control characters and quotes escaped: one line


def _load_game(pyspiel: Any, name: str, params: dict[str, Any]) -> Any:
    """`pyspiel.load_game`, an unknown name or a malformed parameter string refused in one
    line (OpenSpiel raises with its whole list of games; `registry.unplayable` also holds
    back what its C++ code prints on the way)."""
    base = name.split("(", 1)[0]
    known = list(pyspiel.registered_names())
    if base not in known:
        close = difflib.get_close_matches(base, known, n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "see pyspiel.registered_names()"
        raise UnknownGameError(
            f"{_label(name)} names no OpenSpiel game ({hint}); Spiral plays OpenSpiel's "
            "two-player turn-based games"
        )
    try:
        return pyspiel.load_game(name, params) if params else pyspiel.load_game(name)
    except pyspiel.SpielError as err:
        raise UsageError(
            f"{_label(name)} does not load ({first_line(err)}); give the game's short name, with "
            "parameters as name(key=value,...)"
        ) from err


def make(name: str, seed: int = 0, max_turns: int | None = None, **params: Any) -> OpenSpielState:
    """An OpenSpiel game by short name (e.g. "kuhn_poker"); `params` are its game parameters."""
    pyspiel = _pyspiel()
    game = _load_game(pyspiel, name, params)
    game_type = game.get_type()
    n = game.num_players()
    if n != 2:
        raise UsageError(
            f"{_label(name)} has {n} player{'' if n == 1 else 's'}; Spiral plays 2-player games "
            "(pass e.g. openspiel:NAME(players=2) if the game takes it)"
        )
    if game_type.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
        # Simultaneous moves taken in turn: each seat's view hides a move not yet revealed.
        game = pyspiel.load_game_as_turn_based(game.get_type().short_name, game.get_parameters())
        game_type = game.get_type()
    utility = game_type.utility
    if utility not in (pyspiel.GameType.Utility.ZERO_SUM, pyspiel.GameType.Utility.CONSTANT_SUM):
        raise UsageError(
            f"{_label(name)} is not zero-sum (OpenSpiel marks its utility {utility.name}): one "
            "policy in both seats learns only from games where one seat's gain is the other's "
            "loss; choose a zero-sum game"
        )
    return OpenSpielState(game, name, seed=seed, max_turns=max_turns)
