"""One step of self-play, as functions both loops share (`loop.py`, sync; the async
actor-learner in `actors/collector.py`):

    collect: play a step's games with the current weights     (actors, in the async loop)
    learn:   RAE advantages -> training rows -> merged rows -> update   (the learner)

`train_step` is the sync loop's step: collect, then learn, with the same weights. The
async loop calls `learn` on games its actors collected with the same `collect`;
`full_width_step` (`rollout=full_width`) takes the update on the whole game tree's rows
instead (`full_width.py`).

A step's games and seeds are fixed by (`seed`, step, index) (`step_specs`), so no random
state is saved and a resumed run replays what an uninterrupted one played. With
`balanced_chance`, a game that lists its chance outcomes (`State.chance_outcomes`) deals
them in turn, in the order `spread` gives, so that a step holding part of a cycle still
sees every card about equally often.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from typing import Any

from spiral import games
from spiral.agents.base import Agent
from spiral.agents.llm_policy import LLMPolicy
from spiral.algo.assemble import assemble
from spiral.algo.losses import combine_diagnostics, get_loss
from spiral.algo.merge import merge_identical, split_minibatches
from spiral.algo.rae import Baselines, rae_advantages
from spiral.algo.regularizers import Regularizer
from spiral.algo.staleness import kl_lr_scale, row_age
from spiral.algo.stats import episode_metrics
from spiral.engines.base import Learner, SamplingParams
from spiral.report.run_info import reset_peak_rss, window_peak_rss_mb
from spiral.rollout.play import GameSpec, derive_seed, play_with_draw_retry
from spiral.train.averaging import WeightAverage
from spiral.train.config import TrainConfig
from spiral.train.full_width import FullWidth
from spiral.train.population import Population
from spiral.train.setup import RunSetup
from spiral.types import Datum, Episode

POLICY = "policy"

# Where a step's games come from: (learner, step, population) -> (episodes, metrics).
# The sync loop plays them now (`collect`); the async loop takes them from its actors.
Collector = Callable[[Learner, int, "Population | None"], tuple[list[Episode], dict[str, float]]]


@functools.cache
def spread(n: int, per_step: int) -> tuple[int, ...]:
    """The order in which steps take n chance outcomes listed in order (Leduc's 120 deals,
    sorted by the cards): k -> k * a mod n with a coprime to n and nearest n / golden
    ratio, so that any run of consecutive entries draws from all over the list and a step
    holding part of a cycle deals each card about equally often (Leduc at 64 hands a step:
    every card of every seat 19-24 times, against 0-40 in the listed order). A step that
    holds whole cycles is balanced in any order, and keeps the listed one."""
    if per_step % n == 0:
        return tuple(range(n))
    golden = n * 2 / (1 + math.sqrt(5))
    a = min((c for c in range(1, n) if math.gcd(c, n) == 1), key=lambda c: abs(c - golden))
    return tuple(k * a % n for k in range(n))


def step_specs(
    cfg: TrainConfig, step: int, game_params: dict[str, dict[str, Any]], n: int | None = None
) -> list[GameSpec]:
    """The games of one step: round-robin over env_ids, seeds from (seed, step, index).

    With `balanced_chance`, a game that lists its chance outcomes gets them in turn (the
    k-th game of an id in the run deals the (k mod n)-th outcome of `spread(n)`), so every
    deal appears equally often in a batch that is a multiple of n, and over consecutive
    steps otherwise, each step's share spread over all the deals."""
    n = cfg.games_per_step if n is None else n
    specs = []
    seen: dict[str, int] = {}
    for i in range(n):
        gid = cfg.env_ids[(step * n + i) % len(cfg.env_ids)]
        params = dict(game_params.get(gid, {}))
        outcomes = games.chance_outcomes(gid) if cfg.learning.balanced_chance else None
        if outcomes:
            per_step = sum(
                1 for j in range(n) if cfg.env_ids[(step * n + j) % len(cfg.env_ids)] == gid
            )
            k = (step * per_step + seen.get(gid, 0)) % len(outcomes)
            params.update(outcomes[spread(len(outcomes), per_step)[k]])
            seen[gid] = seen.get(gid, 0) + 1
        specs.append(
            GameSpec(
                game_id=gid,
                seed=derive_seed(cfg.seed, step, i),
                seats=(POLICY, POLICY),
                params=params,
            )
        )
    return specs


def collect(
    cfg: TrainConfig,
    setup: RunSetup,
    learner: Learner,
    step: int,
    population: Population | None = None,
    games: int | None = None,
    play: Callable[..., tuple[list[Episode], dict[str, float]]] = play_with_draw_retry,
) -> tuple[list[Episode], dict[str, float]]:
    """Play one step's games (`games`, default the config's) with the current weights:
    both seats are the policy, or, in population play, the policy against the step's
    drawn opponents. Seeds come from (seed, step): an actor of the async loop passes the
    index of its batch of games as `step`. `play` plays them (data-parallel ranks pass
    one that plays their share and gathers the batch, `data_parallel.sharded_play`)."""
    params = SamplingParams(
        max_tokens=cfg.max_tokens,
        temperature=cfg.temperature,
        top_p=cfg.prompts.top_p,
        stop=cfg.prompts.stop,
    )

    def make_policy(sampler: Any, name: str, members: dict[str, str] | None = None) -> LLMPolicy:
        return setup.policy(sampler, params, name, members)

    specs = step_specs(cfg, step, setup.game_params, games)
    players: dict[str, Agent] = {POLICY: make_policy(learner.sampler(), POLICY)}
    opponents: list[str] = []
    if population is not None:
        specs, opponents = population.matchups(specs, step, POLICY)
        players = population.players(learner, specs, make_policy, POLICY, step)
    retries = cfg.learning.max_draw_retries if cfg.learning.filter_draw else 0
    episodes, metrics = play(
        specs,
        players,
        setup.invalid_policy,
        seed=derive_seed(cfg.seed, step, 1),
        max_retries=retries,
    )
    if population is not None:
        population.record(episodes)
        metrics.update(population.metrics(step, opponents))
    policy = players[POLICY]
    if isinstance(policy, LLMPolicy):  # a sharded play's totals over the ranks win
        metrics = {**policy.sampler.counters(), **metrics}
    return episodes, metrics


def learn(
    cfg: TrainConfig,
    learner: Learner,
    episodes: list[Episode],
    baselines: Baselines,
    step: int,
    average: WeightAverage | None = None,
) -> tuple[dict[str, float], Baselines]:
    """Advantages (RAE), training rows, merged identical rows, the update(s)."""
    t0 = time.perf_counter()
    advantages, new_baselines, rae_metrics = rae_advantages(
        episodes,
        baselines,
        decay=cfg.learning.role_baseline_ema_gamma,
        use_baseline=cfg.learning.use_role_baseline,
        trained_agents={POLICY},  # never train on turns sampled by frozen opponents
    )
    centering = cfg.at(cfg.learning.private_centering, step)
    datums, assemble_metrics = assemble(
        episodes,
        advantages,
        gamma=cfg.learning.gamma,
        filter_zero_adv=cfg.learning.filter_zero_adv,
        private_centering=centering,
    )
    datums, merge_metrics = merge_identical(datums)  # exact: identical rows trained once
    if not cfg.learning.private_centering.is_off:
        merge_metrics["private_centering"] = centering  # its value this step (scheduled)
    t1 = time.perf_counter()
    train_metrics = update(cfg, learner, datums, step, average)
    return {
        **rae_metrics,
        **{f"train/{k}": v for k, v in {**assemble_metrics, **merge_metrics}.items()},
        **{f"train/{k}": v for k, v in train_metrics.items()},
        "time/prepare_datums": t1 - t0,
        "time/train": time.perf_counter() - t1,
    }, new_baselines


def update(
    cfg: TrainConfig,
    learner: Learner,
    datums: list[Datum],
    step: int,
    average: WeightAverage | None = None,
) -> dict[str, float]:
    """`num_substeps` optimizer steps, one per minibatch; metrics averaged over them.
    With `lr_kl_target` each step's learning rate is scaled by how far the weights moved
    since the rows were played (`kl_lr_scale`). Every step taken (not skipped for NaN)
    is folded into `average`, the run's weight average."""
    loss_fn = functools.partial(get_loss(cfg.loss_fn), clip=cfg.learning.ppo_clip)
    entropy_coef = cfg.at(cfg.regularizer.entropy_coef, step)
    kl_coef = cfg.at(cfg.regularizer.kl_coef, step)
    reg = Regularizer(
        entropy_coef,
        kl_coef,
        cfg.regularizer.kl_reference,
        cfg.regularizer.move_floor,
        cfg.regularizer.move_floor_coef,
    )
    minibatches = split_minibatches(
        datums, cfg.learning.num_substeps, derive_seed(cfg.seed, step, 2)
    )
    per_substep: list[dict[str, float]] = []
    for minibatch in minibatches:
        metrics = forward_backward_by_staleness(learner, minibatch, loss_fn, reg)
        scale = lr_scale(cfg, metrics)
        metrics.update(learner.optim_step(cfg.at(cfg.learning_rate, step) * scale))
        if average is not None and not metrics.get("skipped_nonfinite"):
            average.update(learner.trained_state())
        per_substep.append(metrics)
    return {
        **mean_metrics(per_substep),
        "num_substeps": float(len(per_substep)),
        "entropy_coef": entropy_coef,
        "kl_coef": kl_coef,
    }


def lr_scale(cfg: TrainConfig, metrics: dict[str, float]) -> float:
    """The factor for one optimizer step's learning rate from `lr_kl_target` (1.0 when
    off), recorded in `metrics` (`lr_kl_scale`), which hold the step's approx_kl."""
    scale = 1.0
    if cfg.learning.lr_kl_target > 0:
        metrics["lr_kl_scale"] = kl_lr_scale(
            metrics.get("approx_kl", 0.0), cfg.learning.lr_kl_target
        )
        scale *= metrics["lr_kl_scale"]
    return scale


def mean_metrics(rows: list[dict[str, float]]) -> dict[str, float]:
    """Each key's mean over `rows` (a key missing from a row counts 0 there); {} for none."""
    if not rows:
        return {}
    keys = sorted({k for row in rows for k in row})
    return {k: sum(row.get(k, 0.0) for row in rows) / len(rows) for k in keys}


def forward_backward_by_staleness(
    learner: Learner, datums: list[Datum], loss_fn: Any, reg: Regularizer
) -> dict[str, float]:
    """One gradient over `datums`; rows sampled by older weights (the async loop) go in
    one call per staleness (versions behind the learner), sharing the batch's
    normaliser, so the gradient is the same and the importance-ratio statistics of each
    staleness are metrics: `staleness/<k>/ratio_mean`, `.../clip_frac`, ...."""
    if not datums:
        return {}
    groups: dict[int, list[Datum]] = {}
    for d in datums:
        groups.setdefault(row_age(d, learner.version), []).append(d)
    if len(groups) == 1:
        (age, rows), *_ = groups.items()
        metrics = learner.forward_backward(rows, loss_fn, reg)
        return {**metrics, **_staleness_keys(age, metrics)} if age else metrics
    normaliser = sum(d.weight for d in datums)
    parts = {
        age: learner.forward_backward(rows, loss_fn, reg, normaliser)
        for age, rows in groups.items()
    }
    merged = combine_diagnostics(list(parts.values()))
    for age, metrics in parts.items():
        merged.update(_staleness_keys(age, metrics))
    return merged


_STALENESS_KEYS = ("ratio_mean", "ratio_min", "ratio_max", "clip_frac", "approx_kl", "num_tokens")


def _staleness_keys(age: int, metrics: dict[str, float]) -> dict[str, float]:
    return {f"staleness/{age}/{k}": metrics[k] for k in _STALENESS_KEYS if k in metrics}


def train_step(
    cfg: TrainConfig,
    setup: RunSetup,
    learner: Learner,
    step: int,
    baselines: Baselines,
    population: Population | None = None,
    collector: Collector | None = None,
    average: WeightAverage | None = None,
) -> tuple[dict[str, float], Baselines, list[Episode]]:
    """One step: the step's games (played now by `collect`, or handed over by the async
    loop's `collector`) and learning on them; returns its metrics and the new baselines."""
    reset_peak_rss()
    gather = collector or functools.partial(collect, cfg, setup)
    t0 = time.perf_counter()
    episodes, rollout_metrics = gather(learner, step, population)
    sample_s = time.perf_counter() - t0
    learn_metrics, new_baselines = learn(cfg, learner, episodes, baselines, step, average)
    sampled = sum(len(t.completion.tokens) for ep in episodes for t in ep.turns if t.completion)
    prompt_tokens = sum(len(t.prompt_ids) for ep in episodes for t in ep.turns)
    total_s = time.perf_counter() - t0
    # Sampling rates over the time spent playing: here, or the actors' (async: the
    # learner's own `time/sample` is then its wait for games).
    play_s = rollout_metrics.get("actor/play_s", sample_s)
    metrics: dict[str, float] = {
        "progress/step": float(step),
        "progress/done_frac": (step + 1) / cfg.num_steps,
        "optim/lr": cfg.at(cfg.learning_rate, step),
        "perf/games_per_s": len(episodes) / max(total_s, 1e-9),
        "perf/sample_tokens_per_s": sampled / max(play_s, 1e-9),
        "perf/prompt_tokens_per_s": prompt_tokens / max(play_s, 1e-9),
        "perf/train_tokens_per_s": (prompt_tokens + sampled)
        / max(learn_metrics["time/train"], 1e-9),
        **episode_metrics(episodes, prefix="train", trained_agent=POLICY),
        **rollout_metrics,
        **learn_metrics,
        "time/sample": sample_s,
        "time/total": total_s,
        "perf/peak_rss_mb": window_peak_rss_mb(),  # this step's peak
    }
    return metrics, new_baselines, episodes


def full_width_step(
    cfg: TrainConfig,
    exact: FullWidth,
    learner: Learner,
    step: int,
    baselines: Baselines,
    population: Population | None = None,
    average: WeightAverage | None = None,
) -> tuple[dict[str, float], Baselines, list[Episode]]:
    """One step of `rollout=full_width`: the exact rows under the current weights, then
    the update; no games are played, so no episodes and the baselines stay as they are."""
    del population  # refused with full width (TrainConfig.validate)
    reset_peak_rss()
    t0 = time.perf_counter()
    centering = cfg.at(cfg.learning.private_centering, step)
    datums, row_metrics = exact.rows(learner, centering)
    t1 = time.perf_counter()
    train_metrics = update(cfg, learner, datums, step, average)
    total_s = time.perf_counter() - t0
    metrics = {
        "progress/step": float(step),
        "progress/done_frac": (step + 1) / cfg.num_steps,
        "optim/lr": cfg.at(cfg.learning_rate, step),
        **row_metrics,
        **{f"train/{k}": v for k, v in train_metrics.items()},
        "time/train": time.perf_counter() - t1,
        "time/total": total_s,
        "perf/peak_rss_mb": window_peak_rss_mb(),
    }
    if not cfg.learning.private_centering.is_off:
        metrics["train/private_centering"] = centering
    return metrics, baselines, []
