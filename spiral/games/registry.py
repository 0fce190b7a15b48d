"""Maps game ids to State factories. Unknown ids get an error listing the known ones."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import Any

from spiral.errors import UsageError, did_you_mean
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
    raise KeyError(
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


def known_game_ids(obj: Any, attr: str) -> None:
    """A chz validator: the field (one id or a tuple of ids) names registered games."""
    value = getattr(obj, attr)
    for game_id in value if isinstance(value, tuple) else (value,):
        prefix, _, name = game_id.partition(":")
        if game_id in ids() or (name and prefix in _ADAPTERS):
            continue
        raise UsageError(
            f"{attr.removeprefix('X_')}={game_id!r} is not a registered game; "
            f"{did_you_mean(game_id, ids())} (or openspiel:<game> / textarena:<env id>)"
        )
