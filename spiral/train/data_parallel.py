"""Data-parallel training under torchrun: `torchrun --nproc-per-node N --no-python spiral
train key=value ...` runs the same sync loop in N processes (one per GPU, or CPU threads
with gloo).

- Playing: every rank plays its share of a step's games (game i on rank i mod N, with
  the rank's own sampler and seed), and every rank then holds the whole batch, in the
  one-process order (`sharded_play`).
- Learning: every rank computes the same advantages from the same batch, trains its share
  of the rows and the gradients are summed (`engines.torch.parallel.on_ranks`), so the
  ranks apply the same update and stay equal (checked at every checkpoint).
- Writing: rank 0 alone logs, evaluates and writes metrics, checkpoints, pool members
  and the league; the others wait for it at the next collective (a new pool member is
  read back from rank 0's folder by the others). Resume reads the checkpoint on every
  rank (a multi-node run needs the run folder on a shared file system).

Population play runs on ranks as in one process; the async actor-learner, other engines
than torch and fewer games a step than ranks are refused (`check_config`), and so is
`fsdp=true` in one process.

Ctrl-C: torchrun forwards it to every rank, which finish the step and save; torchrun
kills them after `--shutdown-timeout` seconds (30 by default), so give it more than a step
and a checkpoint take.

The batch's games are played with different random streams than one process would use
(each rank samples its own rows), so an N-rank run is a different, equally valid run of
the same config, not a replay of the one-process run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spiral.agents.base import Agent
from spiral.engines.torch.parallel.distributed import Ranks
from spiral.prompts.invalid import InvalidMovePolicy
from spiral.rollout.play import GameSpec, derive_seed, play_with_draw_retry
from spiral.train.config import ConfigError, TrainConfig
from spiral.train.setup import RunSetup
from spiral.train.step import POLICY
from spiral.types import Episode


def check_config(cfg: TrainConfig, ranks: Ranks) -> None:
    """Refuse, with what to do instead, what several ranks cannot run yet."""
    if ranks.world == 1:
        if cfg.compute.fsdp:
            raise ConfigError(
                "fsdp=true shards the model over the processes of a torchrun launch, and "
                "this is one process: torchrun --nproc-per-node N --no-python spiral train "
                "... fsdp=true (or leave fsdp off)"
            )
        return
    if cfg.actors is not None:
        raise ConfigError(
            f"use_async_actor_learner=true cannot run under torchrun ({ranks.world} ranks): "
            "the async actor-learner scales by adding Ray actors (num_actors) instead"
        )
    if cfg.compute.engine != "torch" or (cfg.compute.sampler_engine or "torch") != "torch":
        raise ConfigError(
            f"torchrun runs the torch engine only (engine={cfg.compute.engine}, "
            f"sampler_engine={cfg.compute.sampler_engine or cfg.compute.engine}); launch one process for "
            "other engines"
        )
    if cfg.compute.fsdp:
        _check_fsdp(cfg)
    if cfg.games_per_step < ranks.world:
        raise ConfigError(
            f"games_per_step={cfg.games_per_step} is fewer than the {ranks.world} ranks: "
            "every rank needs at least one game per step"
        )


def _check_fsdp(cfg: TrainConfig) -> None:
    """What an FSDP learner cannot do yet (spiral/engines/torch/parallel/sharded.py), refused."""
    swaps = {
        "fsp_enabled=true (population play keeps pool members over one whole model)": (
            cfg.population is not None
        ),
        f"weight_ema_decay={cfg.learning.weight_ema_decay} (the average swaps whole weights in)": (
            cfg.learning.weight_ema_decay > 0
        ),
        "kl_reference=snapshot (the magnet is a frozen copy of the whole weights)": (
            cfg.regularizer.kl_reference == "snapshot"
        ),
    }
    refused = [what for what, on in swaps.items() if on]
    if refused:
        raise ConfigError(
            f"fsdp=true cannot run with {'; '.join(refused)}: turn those off, or run "
            "data-parallel without fsdp (every rank then holds the whole model)"
        )


def shared_setup(setup: RunSetup, ranks: Ranks) -> RunSetup:
    """Rank 0's run folder on every rank: a default folder name holds the start time,
    which ranks started a second apart would not agree on."""
    if ranks.world == 1:
        return setup
    folder = ranks.gather(str(setup.run_dir))[0]
    return dataclasses.replace(setup, run_dir=Path(folder))


def sharded_play(ranks: Ranks) -> Any:
    """`play_with_draw_retry` over this rank's share of the games, then every rank's
    episodes gathered back into spec order. Count metrics are summed over the ranks, and
    so are the policy sampler's token counters (its prefix-cache hit rate is rank 0's).
    Scripted opponents draw from a stream of their own on each rank (rank 0's is the
    one-process stream)."""

    def play(
        specs: Sequence[GameSpec],
        players: Mapping[str, Agent],
        invalid: InvalidMovePolicy,
        seed: int = 0,
        max_retries: int = 0,
    ) -> tuple[list[Episode], dict[str, float]]:
        if ranks.rank > 0:
            for i, label in enumerate(sorted(players)):
                players[label].reseed(derive_seed(seed, ranks.rank, i))
        mine = list(specs[ranks.rank :: ranks.world])
        episodes, metrics = play_with_draw_retry(
            mine, players, invalid, seed=derive_seed(seed, ranks.rank), max_retries=max_retries
        )
        gathered = ranks.gather((episodes, metrics, _token_counters(players)))
        ordered: list[Episode | None] = [None] * len(specs)
        total: dict[str, float] = {"dist/world_size": float(ranks.world)}
        for rank, (rank_episodes, rank_metrics, counters) in enumerate(gathered):
            ordered[rank :: ranks.world] = rank_episodes
            for key, value in {**rank_metrics, **counters}.items():
                total[key] = total.get(key, 0.0) + value
        if total.get("perf/prompt_tokens", 0.0) > 0:
            saved = 1.0 - total["perf/prefill_tokens"] / total["perf/prompt_tokens"]
            total["perf/prefill_saved_fraction"] = saved
        return [ep for ep in ordered if ep is not None], total

    return play


def _token_counters(players: Mapping[str, Agent]) -> dict[str, float]:
    """The policy sampler's additive counters (tokens, megabytes) on this rank."""
    sampler = getattr(players.get(POLICY), "sampler", None)
    counters = getattr(sampler, "counters", None)
    if counters is None:
        return {}
    return {k: v for k, v in counters().items() if k.endswith(("_tokens", "_mb"))}
