"""Who moves: `make(spec, **params)` builds an agent from a spec string.

Specs: `random`, `optimal` (the game's scripted strong player), `checkpoint:PATH`,
`api:MODEL`. Scripted agents need no model.
"""

from __future__ import annotations

from spiral.agents.base import Agent
from spiral.agents.registry import make, specs

__all__ = ["Agent", "make", "specs"]
