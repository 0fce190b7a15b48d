"""The full state each turn of a finished game was taken in, by replaying the game.

A game is rebuilt from its id and seed (which fix the deal, as the rollout made it) and
its moves are applied one at a time; before each turn's move the key is
(game id, seat, both seats' private information, the moves so far): what the turn's seat
saw and what it could not see. Two turns with equal keys faced the same state. A final
turn whose answer was not a legal move (the game ended on it) gets the key of the state
it was taken in like any other.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from spiral import games
from spiral.types import Episode


def turn_state_keys(episode: Episode, params: Mapping[str, Any] | None = None) -> list[Hashable]:
    """One key per turn of `episode` (its game built with `params`, as it was played)."""
    state = games.make(episode.game_id, seed=episode.seed, **dict(params or {}))
    keys: list[Hashable] = []
    for index, turn in enumerate(episode.turns):
        hidden = (tuple(state.private_info(0)), tuple(state.private_info(1)))
        keys.append((episode.game_id, turn.seat, hidden, tuple(episode.moves[:index])))
        if index < len(episode.moves):
            state.apply_action(episode.moves[index])
    return keys
