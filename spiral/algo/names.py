"""The names of this layer's choices, as types, without torch: configs type their fields
with these (`loss_fn: LossName`), so a value the algorithms do not know is refused when
the command line is parsed, and the registries check they match them at import."""

from __future__ import annotations

from typing import Literal, get_args

LossName = Literal["importance_sampling", "ppo", "truncated_importance_sampling"]
LOSS_NAMES: tuple[str, ...] = get_args(LossName)
# What RAE subtracts (spiral.algo.rae).
BaselineKind = Literal["ema", "ema_debiased", "leave_one_out"]
BASELINE_KINDS: tuple[str, ...] = get_args(BaselineKind)
# The KL term's magnet and direction (spiral.algo.regularizers). "snapshot": a frozen
# copy of the policy, refreshed every `kl_magnet_interval` steps (regularised Nash
# dynamics: each phase pulls towards the last phase's policy).
KlReference = Literal["reference", "uniform", "snapshot"]
KL_REFERENCES: tuple[str, ...] = get_args(KlReference)
KlDirection = Literal["reverse", "forward"]
KL_DIRECTIONS: tuple[str, ...] = get_args(KlDirection)
