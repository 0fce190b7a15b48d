"""The synchronous self-play loop, top to bottom.

    play_games -> rae_advantages -> assemble -> forward_backward + optim_step
    -> new sampler -> log, evaluate (every k), checkpoint (every m)

Every seed is derived from (`seed`, step), so a run resumed from a checkpoint replays the
same games and reaches the same metrics as an uninterrupted run. Ctrl-C or SIGTERM finishes
the step in flight, saves a checkpoint of that moment and exits (`stopping.py`); a second
Ctrl-C abandons the step, and resume replays it from the last checkpoint.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spiral import games
from spiral.agents.base import Agent
from spiral.agents.llm_policy import LLMPolicy
from spiral.algo.assemble import assemble
from spiral.algo.losses import get_loss
from spiral.algo.merge import center_by_prompt, merge_identical, split_minibatches
from spiral.algo.rae import Baselines, rae_advantages
from spiral.algo.regularizers import Regularizer
from spiral.algo.stats import episode_metrics
from spiral.engines.base import Learner, SamplingParams
from spiral.errors import SpiralError
from spiral.report.console import format_eval, format_progress
from spiral.report.run_info import reset_peak_rss, window_peak_rss_mb, write_run_info
from spiral.report.sinks import JsonlSink, MultiSink
from spiral.report.transcripts import write_transcripts
from spiral.rollout.play import GameSpec, derive_seed, play_with_draw_retry
from spiral.train.checkpoint import LoopState, latest_checkpoint, save_checkpoint
from spiral.train.config import TrainConfig
from spiral.train.population import Population, members_in_checkpoints
from spiral.train.resume import remove_partial_writes, restore
from spiral.train.setup import RunSetup, build_sinks, make_eval_fn
from spiral.train.stopping import StopRequest
from spiral.types import Datum, Episode

POLICY = "policy"


class TrainingDivergedError(SpiralError, FloatingPointError):
    """Too many consecutive updates with NaN/inf losses or gradients."""


@dataclass
class RunResult:
    run_dir: Path
    steps_done: int
    last_metrics: dict[str, float]
    interrupted: bool = False


def step_specs(
    cfg: TrainConfig, step: int, game_params: dict[str, dict[str, Any]]
) -> list[GameSpec]:
    """The games of one step: round-robin over env_ids, seeds from (seed, step, index).

    With `balanced_chance`, a game that lists its chance outcomes gets them in turn (the
    k-th game of an id in the run deals outcome k mod n), so every deal appears equally
    often in a batch, and over consecutive steps when the batch is not a multiple of n."""
    n = cfg.games_per_step
    specs = []
    seen: dict[str, int] = {}
    for i in range(n):
        gid = cfg.env_ids[(step * n + i) % len(cfg.env_ids)]
        params = dict(game_params.get(gid, {}))
        outcomes = games.chance_outcomes(gid) if cfg.balanced_chance else None
        if outcomes:
            per_step = sum(
                1 for j in range(n) if cfg.env_ids[(step * n + j) % len(cfg.env_ids)] == gid
            )
            params.update(outcomes[(step * per_step + seen.get(gid, 0)) % len(outcomes)])
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
) -> tuple[list[Episode], dict[str, float]]:
    """Play one step's games with the current weights: both seats are the policy, or,
    in population play, the policy against the step's drawn opponents."""
    params = SamplingParams(
        max_tokens=cfg.max_tokens, temperature=cfg.temperature, top_p=cfg.top_p, stop=cfg.stop
    )

    def make_policy(sampler: Any, name: str, members: dict[str, str] | None = None) -> LLMPolicy:
        return LLMPolicy(
            sampler,
            setup.prompt_spec,
            params,
            name=name,
            spec_by_game=setup.spec_by_game,
            members=members,
        )

    specs = step_specs(cfg, step, setup.game_params)
    players: dict[str, Agent] = {POLICY: make_policy(learner.sampler(), POLICY)}
    opponents: list[str] = []
    if population is not None:
        specs, opponents = population.matchups(specs, step, POLICY)
        players = population.players(learner, specs, make_policy, POLICY, step)
    retries = cfg.max_draw_retries if cfg.filter_draw else 0
    episodes, metrics = play_with_draw_retry(
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
    if isinstance(policy, LLMPolicy):
        metrics.update(policy.sampler.counters())
    return episodes, metrics


def learn(
    cfg: TrainConfig, learner: Learner, episodes: list[Episode], baselines: Baselines, step: int
) -> tuple[dict[str, float], Baselines]:
    """Advantages (RAE), training rows, merged identical rows, the update(s)."""
    t0 = time.perf_counter()
    advantages, new_baselines, rae_metrics = rae_advantages(
        episodes,
        baselines,
        decay=cfg.role_baseline_ema_gamma,
        use_baseline=cfg.use_role_baseline,
        trained_agents={POLICY},  # never train on turns sampled by frozen opponents
        kind=cfg.rae_baseline,
    )
    datums, assemble_metrics = assemble(
        episodes, advantages, gamma=cfg.gamma, filter_zero_adv=cfg.filter_zero_adv
    )
    merge_metrics: dict[str, float] = {}
    if cfg.prompt_baseline:
        datums, centering = center_by_prompt(datums)
        merge_metrics.update(centering)
    if cfg.merge_rows:
        datums, merged = merge_identical(datums)
        merge_metrics.update(merged)
    t1 = time.perf_counter()
    train_metrics = update(cfg, learner, datums, step)
    return {
        **rae_metrics,
        **{f"train/{k}": v for k, v in {**assemble_metrics, **merge_metrics}.items()},
        **{f"train/{k}": v for k, v in train_metrics.items()},
        "time/prepare_datums": t1 - t0,
        "time/train": time.perf_counter() - t1,
    }, new_baselines


def update(cfg: TrainConfig, learner: Learner, datums: list[Datum], step: int) -> dict[str, float]:
    """`num_substeps` optimizer steps, one per minibatch; metrics averaged over them."""
    loss_fn = functools.partial(get_loss(cfg.loss_fn), clip=cfg.ppo_clip)
    entropy_coef, kl_coef = cfg.entropy_coef_at(step), cfg.kl_coef_at(step)
    reg = Regularizer(
        entropy_coef,
        kl_coef,
        cfg.kl_reference,
        cfg.kl_direction,
    )
    minibatches = split_minibatches(datums, cfg.num_substeps, derive_seed(cfg.seed, step, 2))
    per_substep: list[dict[str, float]] = []
    for minibatch in minibatches:
        metrics = learner.forward_backward(minibatch, loss_fn, reg) if minibatch else {}
        metrics.update(learner.optim_step(cfg.learning_rate_at(step)))
        per_substep.append(metrics)
    keys = sorted({k for m in per_substep for k in m})
    mean = {k: sum(m.get(k, 0.0) for m in per_substep) / len(per_substep) for k in keys}
    return {
        **mean,
        "num_substeps": float(len(per_substep)),
        "entropy_coef": entropy_coef,
        "kl_coef": kl_coef,
    }


def train_step(
    cfg: TrainConfig,
    setup: RunSetup,
    learner: Learner,
    step: int,
    baselines: Baselines,
    population: Population | None = None,
) -> tuple[dict[str, float], Baselines, list[Episode]]:
    """One step of self-play and learning; returns its metrics and the new baselines."""
    reset_peak_rss()
    t0 = time.perf_counter()
    episodes, rollout_metrics = collect(cfg, setup, learner, step, population)
    sample_s = time.perf_counter() - t0
    learn_metrics, new_baselines = learn(cfg, learner, episodes, baselines, step)
    sampled = sum(len(t.completion.tokens) for ep in episodes for t in ep.turns if t.completion)
    prompt_tokens = sum(len(t.prompt_ids) for ep in episodes for t in ep.turns)
    total_s = time.perf_counter() - t0
    metrics: dict[str, float] = {
        "progress/step": float(step),
        "progress/done_frac": (step + 1) / cfg.num_steps,
        "optim/lr": cfg.learning_rate_at(step),
        "perf/games_per_s": len(episodes) / max(total_s, 1e-9),
        "perf/sample_tokens_per_s": sampled / max(sample_s, 1e-9),
        "perf/prompt_tokens_per_s": prompt_tokens / max(sample_s, 1e-9),
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


def _print_flushed(line: str) -> None:
    print(line, flush=True)


@dataclass
class _Start:
    learner: Learner | None  # None: the checkpoint already finished the run
    step: int
    baselines: Baselines
    population: Population | None


def _begin(
    cfg: TrainConfig,
    run_dir: Path,
    make_learner: Callable[[], Learner],
    log: Callable[[str], None],
) -> _Start:
    """The learner, first step, baselines and population: from the newest intact
    checkpoint, or fresh."""
    restored = restore(cfg, run_dir / "checkpoints", make_learner, log)
    if restored is None:
        learner = make_learner()
        return _Start(learner, 0, Baselines({}), _population(cfg, run_dir, learner, {}, run_dir))
    state = restored.state
    if state.step >= cfg.num_steps:
        log(
            f"{restored.folder} is at step {state.step} of {cfg.num_steps}: the run is "
            "finished, nothing to do (raise max_steps to train further)"
        )
        return _Start(None, state.step, Baselines({}), None)
    log(f"resumed from {restored.folder} at step {state.step}")
    saved_t = state.config.get("temperature", cfg.temperature)
    if saved_t != cfg.temperature:
        log(f"temperature {saved_t} -> {cfg.temperature}: sampling and scoring now use it")
    source = restored.folder.parent.parent  # the run folder the checkpoint came from
    population = _population(cfg, run_dir, restored.learner, state.extra, source)
    return _Start(restored.learner, state.step, Baselines.from_json(state.baselines), population)


def _population(
    cfg: TrainConfig, run_dir: Path, learner: Learner, extra: dict[str, Any], source: Path
) -> Population | None:
    """Population play's state (fsp_enabled): the pool's members come back from the run
    folder the checkpoint was written in."""
    if not cfg.fsp_enabled:
        return None
    population = Population.restore(cfg, source, learner, extra)
    population.run_dir = run_dir
    return population


def _count_bad_steps(
    cfg: TrainConfig,
    metrics: dict[str, float],
    bad_steps: int,
    step: int,
    log: Callable[[str], None],
) -> int:
    """Consecutive steps whose update was skipped for NaN/inf; too many stop the run."""
    if not metrics.get("train/skipped_nonfinite"):
        return 0
    bad_steps += 1
    log(f"step {step}: NaN/inf in the loss or gradients, update skipped")
    if bad_steps >= cfg.max_bad_steps:
        raise TrainingDivergedError(
            f"{bad_steps} consecutive steps had NaN/inf losses or gradients (the policy "
            "diverged); lower learning_rate or max_grad_norm and resume from the last "
            "checkpoint, or raise max_bad_steps"
        )
    return bad_steps


def train(
    cfg: TrainConfig,
    setup: RunSetup,
    make_learner: Callable[[], Learner],
    log: Callable[[str], None] | None = None,
) -> RunResult:
    """Run (or resume) training as configured; returns where it stopped. `log` gets one
    line per step and per evaluation (default: stdout, flushed, so `make train > log.txt`
    shows each line as it happens)."""
    log = log or _print_flushed
    run_dir = setup.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt_dir = run_dir / "checkpoints"
    if removed := remove_partial_writes(ckpt_dir):
        log(f"removed {removed} unfinished checkpoint write(s) left by a killed run")
    begun = _begin(cfg, run_dir, make_learner, log)
    learner, start, baselines, population = (
        begun.learner,
        begun.step,
        begun.baselines,
        begun.population,
    )
    if learner is None:
        return RunResult(run_dir, start, {})
    # Written only once the resume checks passed: a refused resume keeps the old config.
    (run_dir / "config.json").write_text(json.dumps(cfg.to_json(), indent=2), encoding="utf-8")
    write_run_info(run_dir)
    # After any load: the learner scores at the temperature the sampler draws at.
    learner.temperature = cfg.temperature
    jsonl = JsonlSink(run_dir / "metrics.jsonl")
    jsonl.truncate_after(start - 1)  # rows past the checkpoint belong to a lost future
    sinks = MultiSink([jsonl, *build_sinks(cfg, run_dir)])
    evaluate = make_eval_fn(cfg, setup)

    def checkpoint(next_step: int, final: bool = False) -> Path:
        extra = population.to_json() if population is not None else {}
        state = LoopState(next_step, baselines.to_json(), cfg.to_json(), extra)
        path = save_checkpoint(ckpt_dir, state, learner.save, final=final)
        if population is not None:
            population.prune_folders(members_in_checkpoints(ckpt_dir))
        return path

    metrics: dict[str, float] = {}
    step, bad_steps = start, 0
    started = time.perf_counter()
    with StopRequest(log) as stop:
        try:
            for step in range(start, cfg.num_steps):
                if population is not None:
                    population.begin_step(learner, step)
                if cfg.kl_reference == "snapshot" and step % cfg.kl_magnet_interval == 0:
                    learner.refresh_magnet()
                if cfg.eval_every and step % cfg.eval_every == 0:
                    found = evaluate(learner, step, population)
                    sinks.log(found, step)
                    log(format_eval(step, found))
                metrics, baselines, episodes = train_step(
                    cfg, setup, learner, step, baselines, population
                )
                if cfg.transcripts_per_step:
                    write_transcripts(
                        episodes, run_dir / "transcripts", step, limit=cfg.transcripts_per_step
                    )
                sinks.log(metrics, step)
                elapsed = time.perf_counter() - started
                log(format_progress(step + 1, cfg.num_steps, metrics, elapsed, first=start))
                bad_steps = _count_bad_steps(cfg, metrics, bad_steps, step, log)
                last = step + 1 == cfg.num_steps
                scheduled = bool(cfg.save_every) and (step + 1) % cfg.save_every == 0
                if (scheduled or stop.requested) and not last:
                    path = checkpoint(step + 1)
                    if stop.requested:
                        log(f"stopped by {stop.signal_name}: saved {path}; run the same "
                            "command again to resume")  # fmt: skip
                        return RunResult(run_dir, step + 1, metrics, interrupted=True)
            step = cfg.num_steps
            if cfg.eval_every:
                final_eval = evaluate(learner, step, population)
                sinks.log(final_eval, step)
                log(format_eval(step, final_eval))
                metrics.update(final_eval)
            path = checkpoint(step, final=True)
            log(f"final checkpoint: {path}")
        except KeyboardInterrupt:
            kept = latest_checkpoint(ckpt_dir)
            log(
                f"\ninterrupted: step {step} abandoned; the same command resumes from "
                f"{kept if kept is not None else 'the start'}"
            )
            return RunResult(run_dir, step, metrics, interrupted=True)
        finally:
            sinks.close()
    return RunResult(run_dir, step, metrics)
