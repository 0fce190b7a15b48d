"""Population play (fictitious self-play): the pool of past policies and each step's matchups.

With `fsp_enabled`, the current policy plays against frozen snapshots of itself instead
of (or as well as) its live self. The pieces here are values and pure functions; the
loop does the side effects (the learner takes, loads and drops snapshots).

- **Membership** (the original's rule, its names): at the start of step `i`, if
  `i >= fsp_start_from` and `i % fsp_update_interval == 0`, the weights that play step
  `i` join the pool as member `step_<i>`; the pool is FIFO at `fsp_pool_size`. Start the
  pool after the policy has left its first degenerate strategy: on Kuhn a pool filled
  from step 0 with snapshots of the card-blind plateau held the policy on it, and a pool
  from step 40 (`fsp_start_from=40`) was no worse than self-play over three seeds
  (docs/results.md, "Population play on Kuhn").
- **Opponents**: per game, uniform over the pool members, the fixed members
  (`fsp_fixed_opponents`: random, optimal, checkpoint:PATH, api:MODEL) and, with
  `fsp_include_current`, the current policy itself (a plain self-play game) — the
  original's rule. `fsp_current_fraction` instead fixes the share of self-play games.
- **Seats**: the current policy sits in seat 0 in exactly half of a step's games (which
  ones is drawn from the step's seed); only its own turns are trained on (the original
  also trained on the frozen opponent's turns: a bug) and RAE's baselines per (game, seat)
  come from its seats only.
- **Full fine-tuning** (members are model folders, `fsp_max_loaded_members` of them in
  memory): the games a step draws against members are confined to that many members
  (`confine`), so no member is read from disk more than once a step; the shares of
  member, fixed and self-play games are unchanged, and with uniform sampling so is each
  member's chance per game.
- **Cost**: with LoRA the policy and its members are one joint agent, one sampler call
  per wave (`agents/llm_policy.py`, members as adapters of one model).
- **On disk and on resume**: each member lives in `run_dir/pool/<member>/`
  (`pool_files.py`), hashed and sealed when it joins and checked before it loads back; a
  member folder goes once neither the pool nor a kept checkpoint refers to it
  (`prune_folders`). The league rates every step's games (`league/<name>/...` metrics,
  `league.json`, spiral/evaluation/league.py) and is saved with each checkpoint.
- Every draw is seeded by (seed, step), so a resumed run plays the same games.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from spiral.agents.base import Agent
from spiral.checkpoints.manifest import (
    COMPLETE,
    seal,
    write_manifest,
)
from spiral.engines.base import FrozenCopies, Learner
from spiral.errors import UsageError
from spiral.evaluation import league as league_lib
from spiral.rollout.play import GameSpec, derive_seed
from spiral.train.pool_files import POOL_DIR, check_member
from spiral.types import Episode

MEMBER_PREFIX = "step_"
SELF = "<current>"  # the opponent choice "the current policy itself"


@dataclass(frozen=True)
class Pool:
    """The pool's members, oldest first: (name, the step whose weights it holds)."""

    members: tuple[tuple[str, int], ...] = ()

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.members]

    def to_json(self) -> dict[str, Any]:
        return {"members": [[name, step] for name, step in self.members]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Pool:
        return cls(tuple((str(name), int(step)) for name, step in data.get("members", [])))


def copies(learner: Learner) -> FrozenCopies:
    """The learner's frozen copies, where the pool's members live; refused for an engine
    that cannot hold any."""
    found = learner.frozen
    if found is None:
        raise UsageError(
            f"population play keeps past policies as frozen copies, which "
            f"{type(learner).__name__} cannot hold; use engine=torch"
        )
    return found


def member_name(step: int) -> str:
    return f"{MEMBER_PREFIX}{step:06d}"


def joins_at(step: int, start_from: int, interval: int) -> bool:
    """Whether the weights that play `step` join the pool."""
    return step >= start_from and step % interval == 0


def advance(
    pool: Pool, step: int, start_from: int, interval: int, size: int
) -> tuple[Pool, str | None, list[str]]:
    """The pool at the start of `step`: (new pool, the member added or None, evicted names)."""
    if not joins_at(step, start_from, interval):
        return pool, None, []
    name = member_name(step)
    members = (*pool.members, (name, step))
    evicted = [n for n, _ in members[: max(0, len(members) - size)]]
    return replace(pool, members=members[-size:]), name, evicted


def pool_at(step: int, start_from: int, interval: int, size: int) -> Pool:
    """The pool at the start of `step` of an uninterrupted run (what resume must rebuild)."""
    pool = Pool()
    for s in range(step + 1):
        pool, _, _ = advance(pool, s, start_from, interval, size)
    return pool


def choose_opponents(
    n_games: int,
    candidates: Sequence[str],
    rng: random.Random,
    include_current: bool,
    current_fraction: float | None,
) -> list[str]:
    """One opponent label per game: a candidate, or SELF for a plain self-play game."""
    options = list(candidates)
    if not options:
        return [SELF] * n_games
    weights = [1.0] * len(options)
    if current_fraction is None and include_current:
        options.append(SELF)
        weights.append(sum(weights) / len(weights))  # the current policy as one more member
    out = []
    for _ in range(n_games):
        if current_fraction is not None and include_current and rng.random() < current_fraction:
            out.append(SELF)
        else:
            out.append(rng.choices(options, weights=weights)[0])
    return out


def confine(
    opponents: Sequence[str],
    members: Sequence[str],
    k: int,
    rng: random.Random,
) -> list[str]:
    """The step's opponents when at most `k` members fit in memory (full fine-tuning):
    `k` members are drawn uniformly without replacement, and every game drawn against a
    member is given one of them instead, uniformly. The shares of member, fixed and
    self-play games stay as drawn, and each member is still met with the same
    probability per game."""
    if len(set(members) & set(opponents)) <= k:
        return list(opponents)
    keys = {m: rng.random() for m in members}
    met = sorted(members, key=lambda m: keys[m], reverse=True)[:k]
    weights = [1.0] * len(met)
    pool = set(members)
    return [rng.choices(met, weights=weights)[0] if o in pool else o for o in opponents]


def balanced_seats(n_games: int, rng: random.Random) -> list[int]:
    """The current policy's seat in each game: seat 0 in exactly half (rounded down)."""
    seats = [0] * (n_games // 2) + [1] * (n_games - n_games // 2)
    rng.shuffle(seats)
    return seats


def population_specs(
    specs: Sequence[GameSpec],
    opponents: Sequence[str],
    current_seats: Sequence[int],
    policy: str,
    label_for: Callable[[str, str], str],
) -> list[GameSpec]:
    """The step's games with their seats filled: the policy in its seat, the opponent
    (`label_for(opponent, game_id)`, the player label) in the other; SELF fills both."""
    out = []
    for spec, opponent, seat in zip(specs, opponents, current_seats, strict=True):
        if opponent == SELF:
            seats = (policy, policy)
        else:
            label = label_for(opponent, spec.game_id)
            seats = (policy, label) if seat == 0 else (label, policy)
        out.append(replace(spec, seats=seats))
    return out


def step_rng(seed: int, step: int) -> random.Random:
    return random.Random(derive_seed(seed, step, 3))


def pool_metrics(
    pool: Pool, step: int, opponents: Sequence[str], steps_of: dict[str, int]
) -> dict[str, float]:
    """The original's `fsp/*` keys: pool shape and this step's matchups."""
    metrics: dict[str, float] = {"fsp/pool_size": float(len(pool.members))}
    if pool.members:
        member_steps = [s for _, s in pool.members]
        metrics["fsp/oldest_agent_step"] = float(min(member_steps))
        metrics["fsp/newest_agent_step"] = float(max(member_steps))
        metrics["fsp/avg_agent_age"] = sum(step - s for s in member_steps) / len(member_steps)
    opponent_steps = [
        step if o == SELF else steps_of[o] for o in opponents if o == SELF or o in steps_of
    ]
    if opponent_steps:
        metrics["fsp/opponent_step_mean"] = sum(opponent_steps) / len(opponent_steps)
        metrics["fsp/opponent_step_min"] = float(min(opponent_steps))
        metrics["fsp/opponent_step_max"] = float(max(opponent_steps))
    if opponents:
        same = sum(1 for o in opponents if o == SELF or steps_of.get(o) == step)
        metrics["fsp/self_play_ratio"] = same / len(opponents)
        # Games against the live policy itself (both seats trained), apart from the
        # original's self_play_ratio, which also counts the pool copy of this step.
        metrics["fsp/live_self_play_ratio"] = sum(1 for o in opponents if o == SELF) / len(
            opponents
        )
        metrics["fsp/members_met"] = float(len({o for o in opponents if o in steps_of}))
        metrics["fsp/fixed_opponent_ratio"] = sum(
            1 for o in opponents if o != SELF and o not in steps_of
        ) / len(opponents)
    return metrics


# ---- the loop's side of population play ----------------------------------------------
@dataclass
class Population:
    """What the loop keeps for population play: the pool, the league, and the agents of
    fixed members. Owns the side effects: snapshots taken, loaded and dropped."""

    cfg: Any  # TrainConfig (not imported: config imports nothing from here)
    run_dir: Path
    pool: Pool
    league: Any  # spiral.evaluation.league.League
    fixed_agents: dict[str, Agent]
    member_tables: dict[str, Any] = field(default_factory=dict)  # name -> TabularPolicy
    # Members and the policy sampled in one batch per wave (per-row adapters) where the
    # learner allows it; False: one sampler call per member (the slower way, kept for
    # `spiral bench what=pool`; always so for full fine-tuning's members).
    batch_members: bool = True
    # Whether this process writes league.json (under torchrun, rank 0 alone).
    writes: bool = True

    @classmethod
    def restore(
        cls, cfg: Any, run_dir: Path, learner: Learner, extra: dict[str, Any]
    ) -> Population:
        """The population saved in a checkpoint's loop state (empty for a fresh run):
        every member's adapter is loaded back from run_dir/pool."""
        pool = Pool.from_json(extra.get("pool", {}))
        for name, _ in pool.members:
            folder = run_dir / POOL_DIR / name
            check_member(name, folder)
            copies(learner).load(name, folder)
        league = league_lib.from_json(extra["league"]) if "league" in extra else league_lib.League()
        return cls(cfg, run_dir, pool, league, {})

    def to_json(self) -> dict[str, Any]:
        return {"pool": self.pool.to_json(), "league": league_lib.to_json(self.league)}

    def begin_step(self, learner: Learner, step: int) -> None:
        """Apply the membership rule at the start of `step`."""
        cfg = self.cfg
        self.pool, added, evicted = advance(
            self.pool,
            step,
            cfg.population.fsp_start_from,
            cfg.population.fsp_update_interval,
            cfg.population.fsp_pool_size,
        )
        if added is not None:
            folder = self.run_dir / POOL_DIR / added
            copies(learner).freeze(added, folder)
            if self.writes:  # hashed and sealed like a checkpoint (check_member)
                write_manifest(folder)
                (folder / COMPLETE).write_text(seal(folder), encoding="utf-8")
        for name in evicted:
            copies(learner).drop(name)

    def matchups(
        self, specs: Sequence[GameSpec], step: int, policy: str
    ) -> tuple[list[GameSpec], list[str]]:
        """The step's games with opponents and seats; also the opponent of each game."""
        cfg = self.cfg
        rng = step_rng(cfg.seed, step)
        candidates = [*self.pool.names, *cfg.population.fsp_fixed_opponents]
        opponents = choose_opponents(
            len(specs),
            candidates,
            rng,
            cfg.population.fsp_include_current,
            cfg.population.fsp_current_fraction,
        )
        if cfg.lora_rank == 0:  # full fine-tuning: no more members than fit in memory
            k = cfg.population.fsp_max_loaded_members
            opponents = confine(opponents, self.pool.names, k, rng)
        seats = balanced_seats(len(specs), rng)
        labelled = population_specs(specs, opponents, seats, policy, fixed_label)
        return labelled, [
            o if o == SELF else fixed_label(o, s.game_id)
            for o, s in zip(opponents, specs, strict=True)
        ]

    def players(
        self,
        learner: Learner,
        specs: Sequence[GameSpec],
        make_policy: Callable[..., Agent],
        policy: str,
        step: int,
    ) -> dict[str, Agent]:
        """An agent for every label of the step's games. The policy and the members it
        meets are one joint agent over the learner's model (`make_policy(sampler, name,
        members)`, a member's label naming its adapter), so each wave is one batched
        sampler call; fixed members are built once (scripted ones per game) and reseeded
        every step from (seed, step), so a resumed run plays the same moves."""
        from spiral import agents

        labels = sorted({label for s in specs for label in s.seats} - {policy})
        members = [label for label in labels if label in set(self.pool.names)]
        out: dict[str, Agent] = {}
        if self.batch_members and copies(learner).share_model:
            joint = make_policy(learner.sampler(), policy, {m: m for m in members})
            out = {policy: joint, **dict.fromkeys(members, joint)}
        else:
            out[policy] = make_policy(learner.sampler(), policy)
            for name in members:
                out[name] = make_policy(copies(learner).sampler(name), name)
        for label in labels:
            if label in members:
                continue
            if "@" in label or label in self.cfg.population.fsp_fixed_opponents:
                if label not in self.fixed_agents:
                    spec, _, game_id = label.partition("@")
                    params = {"game_id": game_id} if game_id else {}
                    self.fixed_agents[label] = agents.make(spec, seed=self.cfg.seed, **params)
                out[label] = self.fixed_agents[label]
                out[label].reseed(derive_seed(self.cfg.seed, step, labels.index(label)))
        return out

    def record(self, episodes: Sequence[Episode]) -> None:
        self.league = league_lib.record(self.league, episodes)
        if self.writes:
            league_lib.write_league(self.run_dir / "league.json", self.league)

    def metrics(self, step: int, opponents: Sequence[str]) -> dict[str, float]:
        steps_of = dict(self.pool.members)
        return {
            **pool_metrics(self.pool, step, opponents, steps_of),
            **league_lib.metrics(self.league),
        }

    def average_metrics(
        self, learner: Learner, make_policy: Callable[[Any, str], Any]
    ) -> dict[str, float]:
        """Exact exploitability (temperature 1) of the pool's average policy on
        single-hand Kuhn: the reach-weighted mixture of the members' strategies, which is
        the policy fictitious play makes converge. Each member's 12-state table is
        computed once (members do not change)."""
        from spiral.analysis.average_policy import average_policy_report
        from spiral.analysis.exploitability import KUHN_GAME_ID, kuhn_tabular_policy
        from spiral.evaluation.model_policy import model_kuhn_exploitability

        tables = []
        for name in self.pool.names:
            if name not in self.member_tables:
                member = make_policy(copies(learner).sampler(name), name)
                found = model_kuhn_exploitability(member)
                self.member_tables[name] = kuhn_tabular_policy(_table_fn(found["distributions"]))
            tables.append(self.member_tables[name])
        for name in set(self.member_tables) - set(self.pool.names):
            del self.member_tables[name]
        report = average_policy_report("kuhn_poker", tables)
        prefix = f"eval/{KUHN_GAME_ID}/pool_average"
        return {
            f"{prefix}/exploitability_t1": report["exploitability"],
            f"{prefix}/nash_conv_t1": report["nash_conv"],
            f"{prefix}/members": float(len(tables)),
        }

    def prune_folders(self, keep: set[str]) -> int:
        """Remove member folders that neither the pool nor any kept checkpoint needs."""
        folder = self.run_dir / POOL_DIR
        if not folder.is_dir():
            return 0
        removed = 0
        for path in folder.iterdir():
            if path.is_dir() and path.name not in keep and path.name not in self.pool.names:
                shutil.rmtree(path, ignore_errors=True)
                removed += 1
        return removed


def _table_fn(distributions: dict[str, dict[str, float]]) -> Callable[[str, int], dict[str, float]]:
    """A Kuhn policy function (information state, seat) -> move distribution from a table."""
    return lambda info, seat: distributions[info]


def fixed_label(opponent: str, game_id: str) -> str:
    """The player label of an opponent: members and model-backed fixed members by name,
    scripted fixed members per game (`optimal@TicTacToe-v0`: the optimal player differs
    by game)."""
    if opponent.startswith(MEMBER_PREFIX) or opponent.partition(":")[0] in ("checkpoint", "api"):
        return opponent
    return f"{opponent}@{game_id}"


def members_in_checkpoints(ckpt_dir: Path) -> set[str]:
    """Pool members that some complete checkpoint of the run refers to (their folders
    must stay so that resuming from that checkpoint rebuilds its pool)."""
    from spiral.train.checkpoint import complete_checkpoints, load_loop_state

    names: set[str] = set()
    for folder in complete_checkpoints(ckpt_dir):
        pool = Pool.from_json(load_loop_state(folder).extra.get("pool", {}))
        names.update(pool.names)
    return names
