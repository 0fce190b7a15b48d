"""The uniform random agent: a seeded baseline opponent for any game.

Choices: its own `random.Random(seed)` (never the global RNG, never the game's rng, so
seating it does not change the game's chance events); uniform over `state.legal_actions()`,
which for open action spaces (negotiation offers) is the game's representative menu.
"""

from __future__ import annotations

import random
from typing import Any

from spiral.agents.base import Agent
from spiral.games.base import State
from spiral.types import Move


class RandomAgent(Agent):
    """Picks a legal move uniformly at random."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    def act(self, state: State) -> Move:
        legal = state.legal_actions()
        if not legal:
            raise ValueError(
                f"RandomAgent.act called on a state with no legal moves ({state!r}); "
                "only ask for a move while the game is not terminal"
            )
        return self.rng.choice(legal)


def make_random(arg: str = "", seed: int = 0, **_: Any) -> Agent:
    """Factory for the `random` spec; `arg` and other params (game_id, ...) are ignored."""
    return RandomAgent(seed=seed)
