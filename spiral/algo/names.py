"""The names of this layer's choices, as types, without torch: configs type their fields
with these (`loss_fn: LossName`), so a value the algorithms do not know is refused when
the command line is parsed, and the registries check they match them at import."""

from __future__ import annotations

from typing import Literal, get_args

LossName = Literal["importance_sampling", "ppo"]
LOSS_NAMES: tuple[str, ...] = get_args(LossName)
# Where a step's rows come from: games sampled and played (every game), or every deal and
# legal move expanded with its probability, the exact expected update (games that list
# their chance outcomes, constrained answers: spiral.algo.full_width).
Rollout = Literal["sampled", "full_width"]
ROLLOUTS: tuple[str, ...] = get_args(Rollout)
# What RAE subtracts (spiral.algo.rae).
# The KL term's magnet (spiral.algo.regularizers). "snapshot": a frozen
# copy of the policy, refreshed every `kl_magnet_interval` steps (regularised Nash
# dynamics: each phase pulls towards the last phase's policy).
KlReference = Literal["reference", "uniform", "snapshot"]
KL_REFERENCES: tuple[str, ...] = get_args(KlReference)
# How population play draws past members (spiral.algo.opponents).
