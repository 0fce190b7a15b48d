"""Maps game ids to State factories. Unknown ids get an error listing the known ones.

Native games are the modules of `_NATIVE_MODULES`, each calling `register` on import; ids
with a prefix (`openspiel:<name>`, `textarena:<env id>`) go to the adapters' `make`. The
conformance suite (`tests/games/test_conformance.py`) runs over every registered id.
`unplayable` builds a prefixed game once when a command line is parsed, so a game that
cannot be played (unknown, one player, more than two seats, general-sum) is one line
before any model loads. A game that lists no moves takes free-form ones
(`takes_free_moves`): what needs a move list (a constrained answer, the random opponent)
is refused for it by `free_form_problem`."""

from __future__ import annotations

import difflib
import functools
import importlib
from collections.abc import Callable
from typing import Any

from spiral.errors import SpiralError, UsageError, did_you_mean
from spiral.games.adapters import UnknownGameError, first_line, quiet_native_output
from spiral.games.base import State

Factory = Callable[..., State]
_FACTORIES: dict[str, Factory] = {}
_ADAPTERS: dict[str, str] = {
    # prefix -> module with a `make(name, seed, **params)` function
    "openspiel": "spiral.games.adapters.openspiel",
    "textarena": "spiral.games.adapters.textarena",
}
# Modules whose import registers native games (kept lazy-free and explicit).
_NATIVE_MODULES = (
    "spiral.games.tictactoe",
    "spiral.games.connect_four",
    "spiral.games.kuhn_poker",
    "spiral.games.leduc_poker",
    "spiral.games.liars_dice",
    "spiral.games.negotiation",
    "spiral.games.pig_dice",
)
_loaded = False


def register(game_id: str, factory: Factory) -> None:
    if game_id in _FACTORIES and _FACTORIES[game_id] is not factory:
        raise ValueError(f"game id {game_id!r} is already registered")
    _FACTORIES[game_id] = factory


def _load_native() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in _NATIVE_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name != module:  # a real missing dependency inside the module
                raise


def ids() -> list[str]:
    """Registered native game ids (adapter ids such as `openspiel:kuhn_poker` not listed)."""
    _load_native()
    return sorted(_FACTORIES)


def make(game_id: str, seed: int = 0, **params: Any) -> State:
    """A fresh game. `params` are the game's own options (e.g. `max_turns`)."""
    _load_native()
    if game_id in _FACTORIES:
        return _FACTORIES[game_id](seed=seed, **params)
    prefix, _, name = game_id.partition(":")
    if name and prefix in _ADAPTERS:
        adapter = importlib.import_module(_ADAPTERS[prefix])
        state: State = adapter.make(name, seed=seed, **params)
        return state
    close = difflib.get_close_matches(game_id, list(_FACTORIES), n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise UnknownGameError(
        f"unknown game id {game_id!r}.{hint} Known ids: {', '.join(sorted(_FACTORIES))}; "
        "or use 'openspiel:<game>' / 'textarena:<env id>' through the adapters."
    )


def chance_outcomes(game_id: str) -> tuple[dict[str, object], ...] | None:
    """The game's enumerable chance outcomes as keyword arguments for `make` (see
    `State.chance_outcomes`); None for adapter games and games that cannot list them."""
    _load_native()
    factory = _FACTORIES.get(game_id)
    outcomes = getattr(factory, "chance_outcomes", None)
    return outcomes() if callable(outcomes) else None


def unplayable(game_id: str) -> str | None:
    """Why `game_id` cannot be played here, in one line, or None when it can: an adapter
    id is built once (seed 0), so an unknown name, a one-player, three-player or
    general-sum game, or an env that cannot be set up is found when the command line
    is read, not after the model has loaded."""
    return _first_look(game_id)[0]


@functools.lru_cache(maxsize=256)
def _first_look(game_id: str) -> tuple[str | None, bool]:
    """(`unplayable`'s line, whether the first position lists no moves), from one build of
    the game at seed 0."""
    if game_id in ids():
        return None, False
    prefix, _, name = game_id.partition(":")
    if not name or prefix not in _ADAPTERS:
        line = f"{game_id!r} is not a registered game; {did_you_mean(game_id, ids())} "
        return line + "(or openspiel:<game> / textarena:<env id>)", False
    try:
        adapter = importlib.import_module(_ADAPTERS[prefix])
        with quiet_native_output():
            state = adapter.make(name, seed=0)
            free = not state.legal_actions()
    except SpiralError as err:
        return str(err), False
    except ModuleNotFoundError as err:  # the adapter's package, with its install command
        return f"{game_id!r} cannot be played here: {first_line(err)}", False
    except Exception as err:  # whatever the library raises: said, not a traceback
        return f"{game_id!r} cannot be set up here ({type(err).__name__}: {first_line(err)})", False
    if state.is_terminal():
        return f"{game_id!r} is over before its first move; there is nothing to play", False
    return None, free


def takes_free_moves(game_id: str) -> bool:
    """True for a game that gives the seat to move no list of moves (a TextArena env that
    prints none, e.g. `textarena:Nim-v0`): the model's answer goes to the game, which judges
    it, as the original SPIRAL plays TextArena. Read off the first position (seed 0) of a
    playable id; native games always list their moves."""
    problem, free = _first_look(game_id)
    return problem is None and free


def free_form_problem(
    game_ids: tuple[str, ...] | list[str], answer_format: str | None, opponents: tuple[str, ...]
) -> str | None:
    """Why games that take free-form moves cannot be played this way, in one line, or
    None: a constrained answer needs a move list, and so does the `random` opponent."""
    free = [g for g in game_ids if takes_free_moves(g)]
    if not free:
        return None
    names = ", ".join(free)
    takes, lists = ("takes", "lists") if len(free) == 1 else ("take", "list")
    if answer_format == "constrained":
        return (
            f"{names} {takes} free-form moves (the game prints no list of them), so there is no "
            "list to constrain the answer to: use answer_format=bracket or answer_format=boxed"
        )
    if any(spec.partition(":")[0] == "random" for spec in opponents):
        return (
            f"the random opponent draws from the listed moves and {names} {lists} none (free-form "
            "moves, judged by the game): play against checkpoint:base, checkpoint:PATH or "
            "api:MODEL instead"
        )
    return None


def known_game_ids(obj: Any, attr: str) -> None:
    """A chz validator: the field (one id or a tuple of ids) names games this machine can
    play (`unplayable`)."""
    value = getattr(obj, attr)
    for game_id in value if isinstance(value, tuple) else (value,):
        check_playable(game_id, attr.removeprefix("X_"))


def check_playable(game_id: str, key: str) -> None:
    """Refuse, in one line naming `key`, a game id that cannot be played (`unplayable`)."""
    problem = unplayable(game_id)
    if problem is not None:
        raise UsageError(f"{key}: {problem}")
