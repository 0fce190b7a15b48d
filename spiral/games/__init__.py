"""Game registry: `ids()` lists the registered game ids, `make(game_id, seed, **params)`
builds a fresh State.

Native games register themselves in `spiral/games/registry.py`. Ids with a prefix reach
adapters: `openspiel:<name>` (pyspiel) and `textarena:<env id>` (textarena package).

Every game is a `State` (base.py): native Python state machines shaped like OpenSpiel's
(`current_player`, `legal_actions`, `apply_action`, `is_terminal`, `returns`, `clone`,
`observation(seat)`), with `private_info(seat)` (what only that seat knows) and, where
useful, `situation(seat)`, `brief(seat)` and `chance_outcomes()`. One conformance suite
(`tests/games/test_conformance.py`) runs over every registered id, among its checks that
no observation leaks another seat's private information; golden transcripts
(`golden.py`) turn any change in a game's text into a diff. Facts about a game that other
layers need sit beside it (`kuhn_equilibrium.py`). Rules and known values:
docs/games.md.
"""

from __future__ import annotations

from spiral.games.base import IllegalMoveError, ObsStyle, State, normalize_move_text
from spiral.games.registry import chance_outcomes, free_form_problem, ids, make, register

__all__ = [
    "IllegalMoveError",
    "ObsStyle",
    "State",
    "chance_outcomes",
    "free_form_problem",
    "ids",
    "make",
    "normalize_move_text",
    "register",
]
