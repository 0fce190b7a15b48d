"""Strong scripted players per game: the `optimal` agent spec.

Choices:
- A registry from game id to a factory `factory(seed=..., **params) -> Agent`, not an
  if/elif chain. The built-in players are named as "module:function" strings and imported
  on first use (the same lazy pattern as the agent spec registry), so importing this module
  stays cheap and the player modules need not import it back.
- `register_optimal(game_id, factory)` adds or replaces nothing silently: registering a
  second, different factory for an id is an error.
- Scripted players read the game State (boards, cards, bet history), never prompt text.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from spiral.agents.base import Agent
from spiral.errors import AgentSpecError

OptimalFactory = Callable[..., Agent]

# Built-in scripted players, imported on first use.
_BUILTIN: dict[str, str] = {
    "TicTacToe-v0": "spiral.agents.minimax:make_minimax",
    "KuhnPokerSingle-v0": "spiral.agents.kuhn_nash:make_kuhn_nash",
    "KuhnPoker-v1": "spiral.agents.kuhn_nash:make_kuhn_nash",
    "ConnectFour-v0": "spiral.agents.connect_four_search:make_connect_four_search",
    "LeducPoker-v0": "spiral.agents.leduc_cfr:make_leduc_cfr",
}
_REGISTERED: dict[str, OptimalFactory] = {}


def register_optimal(game_id: str, factory: OptimalFactory) -> None:
    """Make `factory(seed=..., **params)` the `optimal` player for `game_id`."""
    if game_id in _REGISTERED and _REGISTERED[game_id] is not factory:
        raise ValueError(f"an optimal player for {game_id!r} is already registered")
    _REGISTERED[game_id] = factory


def optimal_game_ids() -> list[str]:
    """Game ids that have a scripted strong player."""
    return sorted(set(_BUILTIN) | set(_REGISTERED))


def _factory_for(game_id: str) -> OptimalFactory:
    if game_id in _REGISTERED:
        return _REGISTERED[game_id]
    target = _BUILTIN.get(game_id)
    if target is None:
        raise AgentSpecError(
            f"no optimal (scripted) player for game {game_id!r}; games that have one: "
            f"{', '.join(optimal_game_ids())}. Register one with "
            "spiral.agents.scripted.register_optimal(game_id, factory)."
        )
    module_name, _, func_name = target.partition(":")
    factory: OptimalFactory = getattr(importlib.import_module(module_name), func_name)
    return factory


def make_optimal(arg: str = "", game_id: str = "", seed: int = 0, **params: Any) -> Agent:
    """Factory for the `optimal` spec: the scripted player for `game_id`.

    `optimal:<game id>` names the game in the spec itself when `game_id` is not passed.
    Extra `params` go to the player (e.g. `depth=` for Connect Four, `alpha=` for Kuhn).
    """
    wanted = game_id or arg
    if not wanted:
        raise ValueError(
            "the `optimal` agent needs a game: pass game_id=... or use the spec "
            f"'optimal:<game id>'; games with one: {', '.join(optimal_game_ids())}"
        )
    if game_id and arg and arg != game_id:
        raise AgentSpecError(f"opponent optimal:{arg} {_OTHER_GAME.format(game_id)}")
    return _factory_for(wanted)(seed=seed, **params)


_OTHER_GAME = "names another game than {}; write optimal (it plays the game being played)"


def optimal_problem(spec: str, game_ids: Sequence[str]) -> str | None:
    """Why the opponent `spec` cannot play each game of `game_ids`, in one line, or None
    (also for a spec other than `optimal` / `optimal:<game>`): a game without a scripted
    player, or a spec naming a game other than the one played."""
    prefix, _, arg = spec.partition(":")
    if prefix != "optimal":
        return None
    missing = [g for g in game_ids if g not in optimal_game_ids()]
    if missing:
        return (
            f"no optimal player for {', '.join(missing)}; games with one: "
            f"{', '.join(optimal_game_ids())}"
        )
    other = [g for g in game_ids if arg and arg != g]
    return f"opponent {spec} {_OTHER_GAME.format(', '.join(other))}" if other else None
