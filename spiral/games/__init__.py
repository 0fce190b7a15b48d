"""Game registry: `ids()` lists the registered game ids, `make(game_id, seed, **params)`
builds a fresh State.

Native games register themselves in `spiral/games/registry.py`. Ids with a prefix reach
adapters: `openspiel:<name>` (pyspiel) and `textarena:<env id>` (textarena package).
"""

from __future__ import annotations

from spiral.games.base import IllegalMoveError, ObsStyle, State, normalize_move_text
from spiral.games.registry import chance_outcomes, ids, make, register

__all__ = [
    "IllegalMoveError",
    "ObsStyle",
    "State",
    "chance_outcomes",
    "ids",
    "make",
    "normalize_move_text",
    "register",
]
