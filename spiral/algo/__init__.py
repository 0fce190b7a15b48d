"""What is learned from finished games: RAE advantages, losses, training rows, statistics.

Pure functions with explicit state (baselines are a value passed in and returned), no
model and no I/O, so every piece is tested against numbers worked by hand. This layer
imports only `spiral.types` (and torch for the losses).
"""

from spiral.algo.assemble import assemble, turn_to_datum
from spiral.algo.losses import LOSSES, get_loss, importance_sampling_loss, ppo_loss
from spiral.algo.rae import Baselines, rae_advantages, turn_advantages
from spiral.algo.stats import episode_metrics, winner_of

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
