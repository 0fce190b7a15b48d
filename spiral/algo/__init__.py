"""What is learned from finished games: RAE advantages, losses, training rows, statistics.

Pure functions with explicit state (baselines are a value passed in and returned), no
model and no I/O, so every piece is tested against numbers worked by hand. This layer
imports only `spiral.types` (and torch for the losses). Importing `spiral.algo` stays
light: the names below load on first attribute access (PEP 562), so a config can import
`spiral.algo.names` without torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spiral.algo.assemble import assemble, turn_to_datum
    from spiral.algo.losses import LOSSES, get_loss, importance_sampling_loss, ppo_loss
    from spiral.algo.rae import Baselines, rae_advantages, turn_advantages
    from spiral.algo.stats import episode_metrics, winner_of

_WHERE = {
    "assemble": "assemble",
    "turn_to_datum": "assemble",
    "LOSSES": "losses",
    "get_loss": "losses",
    "importance_sampling_loss": "losses",
    "ppo_loss": "losses",
    "Baselines": "rae",
    "rae_advantages": "rae",
    "turn_advantages": "rae",
    "episode_metrics": "stats",
    "winner_of": "stats",
}
__all__ = [
    "LOSSES",
    "Baselines",
    "assemble",
    "episode_metrics",
    "get_loss",
    "importance_sampling_loss",
    "ppo_loss",
    "rae_advantages",
    "turn_advantages",
    "turn_to_datum",
    "winner_of",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'spiral.algo' has no attribute {name!r}")
    return getattr(importlib.import_module(f"spiral.algo.{_WHERE[name]}"), name)
