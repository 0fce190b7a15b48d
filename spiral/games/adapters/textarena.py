"""Any two-player TextArena env as a Spiral State (`textarena:<env id>` ids).

Choices:
- The env is built without TextArena's observation wrappers (the `-raw` registration when
  one exists): the State keeps each seat's message log itself, rendered like TextArena's
  LLMObservationWrapper (`[GAME] ...`, `[Player k] ...`).
- Legal moves: TextArena has no move-list API. `legal_actions()` reads the bracketed
  tokens of the newest `Available Moves:`-style line the seat to move was told (TicTacToe,
  ConnectFour...). Where an env prints none, or a list holding a pattern rather than moves
  (`[bet X]` in IndianPoker), or one whose first `TRIALS` moves the env rejects when tried
  on copies of it (TwoDollar's `[Propose]`, whose amount follows the bracket), the game
  takes *free-form* moves there (Nim-v0):
  `legal_actions()` is empty, `parse_action` accepts any text holding a bracketed token,
  leaving the verdict to the env, and `move_example` is the rules' own example, for the
  prompt.
- Invalid moves are detected explicitly, never from turn order (a repeat mover is normal
  in many games): during `env.step` the state's `set_invalid_move` is observed. An invalid
  move raises IllegalMoveError with the env's reason, and the env is restored from a
  snapshot taken before the step, so a rejected move changes nothing, as for native games.
  What an invalid move costs is then the rollout's declared policy, as everywhere else.
- Determinism: TextArena envs draw from Python's global `random` (and reseed it on reset).
  Every env call runs with the global generator swapped for this state's own saved
  generator state, so games are reproducible from the seed, independent of each other and
  of other users of `random`, and clones carry their own copy. Envs that use numpy's or
  other global generators are not covered.
- `private_info(seat)` is the seat's whole message log: coarse but exact (observations are
  a function of it); TextArena does not say which parts are hidden.
- Nothing is downloaded here, but some TextArena envs fetch data (word lists, NLTK) on
  first use; those need network the first time, which is TextArena's behaviour.
"""

from __future__ import annotations

import copy
import difflib
import importlib
import random
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from spiral.errors import UsageError
from spiral.games.adapters import LibraryFailure, UnknownGameError, first_line
from spiral.games.base import IllegalMoveError, State
from spiral.types import Move, Seat

INSTALL_HINT = "pip install 'spiral-selfplay[textarena]'"
_MOVES_MARKER_RE = re.compile(
    r"(?:available|valid|legal|possible)\s+(?:moves|actions)\s*(?:are)?\s*:", re.IGNORECASE
)
_BRACKET_RE = re.compile(r"\[[^\[\]\n]{1,200}\]")
TRIALS = 3  # listed moves tried on copies before a list is judged not to be the moves
# A listed token that is a pattern: "[bet X]", "[raise <amount>]", "[give N wood]".
_PLACEHOLDER_RE = re.compile(r"\[\S.*\s(?:[A-Z]|<[^<>]*>|amount|quantity|number)(?:\s.*)?\]")
_EXAMPLE_RE = re.compile(r"(?:e\.g\.|for example)[,:]?\s*['\"`]?(\[[^\[\]\n]{1,200}\])", re.I)


def _textarena() -> Any:
    try:
        return importlib.import_module("textarena")
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            f"the TextArena adapter needs the textarena package: {INSTALL_HINT}"
        ) from err


class TextArenaState(State):
    """A TextArena env behind the Spiral State surface; see the module docstring."""

    default_obs_style = "history"

    def __init__(self, env: Any, name: str, seed: int = 0, max_turns: int | None = None):
        super().__init__(seed=seed, max_turns=max_turns)
        self.game_id = f"textarena:{name}"
        self._env = env
        self._listed: list[Move] = []
        self._listed_at = -1  # the position (moves played) `_listed` was read at
        # The global-`random` state the env sees; seeded like TextArena's own reset does.
        self._env_random_state = random.Random(seed).getstate()
        with self._env_random():
            env.reset(num_players=2, seed=seed)
        self._drain_messages()

    # ---- rules hooks -------------------------------------------------------------
    def _current_player(self) -> Seat:
        return int(self._env.state.current_player_id)

    def _legal_actions(self) -> list[Move]:
        position = len(self.move_history)
        if self._listed_at != position:  # read once per position: a trial step is costly
            self._listed, self._listed_at = self._read_list(), position
        return list(self._listed)

    def _read_list(self) -> list[Move]:
        for _, text in reversed(self._messages[self._current_player()]):
            found = _MOVES_MARKER_RE.search(text)
            if found:
                tokens = _BRACKET_RE.findall(text[found.end() :])
                if any(_PLACEHOLDER_RE.search(t) for t in tokens):
                    return []  # "[bet X]" is a pattern, not a move: the env judges answers
                moves = list(dict.fromkeys(tokens))  # unique, in the order shown
                return moves if self._takes_one(moves) else []
        return []

    def _takes_one(self, moves: list[Move]) -> bool:
        """Whether the env accepts one of the first `TRIALS` listed moves, each tried on a
        copy: a list it rejects throughout is not this position's moves (another seat's
        list, or verbs whose arguments follow outside the brackets: `[Propose] $1.20`)."""
        for move in moves[:TRIALS]:
            trial = copy.copy(self)
            trial._env = copy.deepcopy(self._env)
            try:
                if not trial._step_watching_invalid(move):
                    return True
            except LibraryFailure:
                return True  # the env's own failure: said when the move is really played
        return False

    def parse_action(self, text: str) -> Move | None:
        if self.is_terminal():
            return None
        if self._legal_actions():
            return super().parse_action(text)
        stripped = text.strip()
        return stripped if _BRACKET_RE.search(stripped) else None

    def move_example(self) -> Move:
        """The move the rules give as an example (`e.g. '[0 3]'`), else the first bracketed
        token the seat to move was told, for a game that lists no moves."""
        legal = self._legal_actions()
        if legal or self.is_terminal():
            return super().move_example()
        told = "\n".join(text for _, text in self._messages[self._current_player()])
        example = _EXAMPLE_RE.search(told) or _BRACKET_RE.search(told)
        return example.group(example.lastindex or 0) if example else super().move_example()

    def _apply(self, move: Move) -> None:
        snapshot = (copy.deepcopy(self._env), self._env_random_state)
        broke: LibraryFailure | None = None
        try:
            reasons = self._step_watching_invalid(move)
        except LibraryFailure as err:
            broke, reasons = err, []
        if reasons or broke:  # rejected, or the env broke: the state is as before the move
            self._env, self._env_random_state = snapshot
            self.move_history.pop()  # the base class recorded the move before applying it
            if broke:
                raise broke
            raise IllegalMoveError(f"{self.game_id}: the env rejected {move!r}: {reasons[0]}")
        self._drain_messages()

    def _game_over(self) -> bool:
        return bool(self._env.state.done)

    def _returns(self) -> tuple[float, float]:
        rewards = self._env.state.rewards or {}
        return (float(rewards.get(0, 0.0)), float(rewards.get(1, 0.0)))

    def private_info(self, seat: Seat) -> tuple[object, ...]:
        return tuple(self._messages[seat])

    # ---- helpers -----------------------------------------------------------------
    @contextmanager
    def _env_random(self) -> Iterator[None]:
        outside = random.getstate()
        random.setstate(self._env_random_state)
        try:
            yield
        finally:
            self._env_random_state = random.getstate()
            random.setstate(outside)

    def _step_watching_invalid(self, move: Move) -> list[str]:
        """Step the env; return the reasons it gave for an invalid move (empty if none)."""
        state = self._env.state
        reasons: list[str] = []
        original: Callable[..., Any] = state.set_invalid_move

        def watched(reason: str = "", *args: Any, **kwargs: Any) -> Any:
            reasons.append(str(reason))
            return original(reason, *args, **kwargs)

        state.set_invalid_move = watched
        try:
            with self._env_random():
                self._env.step(move)
        except Exception as err:  # the env's own code broke: not the answer's fault
            raise LibraryFailure(
                f"{self.game_id}: TextArena's env failed inside its own step on {move!r} "
                f"({type(err).__name__}: {first_line(err)}) after {len(self.move_history) - 1} "
                "moves; the game cannot go on"
            ) from err
        finally:
            del state.set_invalid_move  # back to the class's method
        return reasons

    def _drain_messages(self) -> None:
        """Move the env's pending per-seat messages into our logs."""
        state = self._env.state
        roles = getattr(state, "role_mapping", {}) or {}
        for seat in (0, 1):
            for from_id, text, *_ in state.observations.get(seat, []):
                sender = roles.get(from_id, "GAME" if from_id == -1 else f"Player {from_id}")
                self._tell(seat, str(text).strip("\n"), sender=sender)
            state.observations[seat] = []


def make(name: str, seed: int = 0, max_turns: int | None = None, **params: Any) -> TextArenaState:
    """A TextArena env by id (e.g. "TicTacToe-v0"); `params` go to the env's constructor."""
    ta = _textarena()
    registry = ta.envs.registration.ENV_REGISTRY
    env_id = f"{name}-raw" if f"{name}-raw" in registry else name
    if env_id not in registry:
        close = difflib.get_close_matches(name, list(registry), n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "see textarena's env registry"
        raise UnknownGameError(f"{repr(f'textarena:{name}')} names no TextArena env ({hint})")
    try:
        env = ta.make(env_id, **params)
        return TextArenaState(env, name, seed=seed, max_turns=max_turns)
    except AssertionError as err:  # TextArena asserts its player count in reset()
        raise UsageError(
            f"{repr(f'textarena:{name}')} cannot be played by two players ({first_line(err)}); "
            "Spiral plays two-player envs"
        ) from err
    except (LookupError, SyntaxError, OSError, ImportError, ValueError) as err:
        need = _setup_need(err, ta)
        if need is None:
            raise
        raise UsageError(
            f"{repr(f'textarena:{name}')} cannot be set up here ({type(err).__name__}: "
            f"{first_line(err)}); {need}"
        ) from err


def _setup_need(err: BaseException, ta: Any) -> str | None:
    """What a TextArena env that fails while it is built would need, in words, for the
    failures seen across its registry; None for anything else."""
    version = getattr(ta, "__version__", "?")
    said = str(err)
    if isinstance(err, LookupError) and "Resource" in said:  # NLTK data, fetched on first use
        resource = re.search(r"Resource\W+(\w+)", said)
        name = resource.group(1) if resource else "the named resource"
        return f"it needs NLTK's {name!r} data: with network, python -m nltk.downloader {name}"
    if "API key" in said or "API_KEY" in said:
        return "it plays against a hosted model and needs that service's API key in the environment"
    if isinstance(err, SyntaxError):
        return (
            f"textarena {version}'s code for this env needs a newer Python than "
            f"{sys.version_info.major}.{sys.version_info.minor}"
        )
    if isinstance(err, (OSError, ImportError)) and "textarena" in said:
        return f"the textarena {version} package lacks this env's files (a packaging gap)"
    return None
