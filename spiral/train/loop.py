"""The synchronous self-play loop, top to bottom.

    play_games -> rae_advantages -> assemble -> forward_backward + optim_step
    -> new sampler -> log, evaluate (every k), checkpoint (every m)

Every seed is derived from (`seed`, step), so a run resumed from a checkpoint replays the
same games and reaches the same metrics as an uninterrupted run. Ctrl-C saves a
checkpoint at the last finished step and exits cleanly.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spiral.agents.llm_policy import LLMPolicy
from spiral.algo.assemble import assemble
from spiral.algo.losses import get_loss
from spiral.algo.rae import Baselines, rae_advantages
from spiral.algo.stats import episode_metrics
from spiral.engines.base import Learner, SamplingParams
from spiral.report.console import format_progress
from spiral.report.sinks import JsonlSink, MultiSink
from spiral.report.transcripts import write_transcripts
from spiral.rollout.play import GameSpec, derive_seed, play_with_draw_retry
from spiral.train.checkpoint import LoopState, latest_checkpoint, load_loop_state, save_checkpoint
from spiral.train.config import TrainConfig
from spiral.train.setup import RunSetup, build_sinks, make_eval_fn
from spiral.types import Episode

POLICY = "policy"


@dataclass
class RunResult:
    run_dir: Path
    steps_done: int
    last_metrics: dict[str, float]
    interrupted: bool = False


def step_specs(
    cfg: TrainConfig, step: int, game_params: dict[str, dict[str, Any]]
) -> list[GameSpec]:
    """The games of one step: round-robin over env_ids, seeds from (seed, step, index)."""
    n = cfg.games_per_step
    return [
        GameSpec(
            game_id=(gid := cfg.env_ids[(step * n + i) % len(cfg.env_ids)]),
            seed=derive_seed(cfg.seed, step, i),
            seats=(POLICY, POLICY),
            params=game_params.get(gid, {}),
        )
        for i in range(n)
    ]


def train_step(
    cfg: TrainConfig, setup: RunSetup, learner: Learner, step: int, baselines: Baselines
) -> tuple[dict[str, float], Baselines, list[Episode]]:
    """One step of self-play and learning; returns its metrics and the new baselines."""
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    params = SamplingParams(
        max_tokens=cfg.max_tokens, temperature=cfg.temperature, top_p=cfg.top_p, stop=cfg.stop
    )
    policy = LLMPolicy(
        learner.sampler(), setup.prompt_spec, params, name=POLICY, spec_by_game=setup.spec_by_game
    )
    specs = step_specs(cfg, step, setup.game_params)
    retries = cfg.max_draw_retries if cfg.filter_draw else 0
    episodes, rollout_metrics = play_with_draw_retry(
        specs,
        {POLICY: policy},
        setup.invalid_policy,
        seed=derive_seed(cfg.seed, step, 1),
        max_retries=retries,
    )
    timings["time/sample"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    advantages, new_baselines, rae_metrics = rae_advantages(
        episodes,
        baselines,
        decay=cfg.role_baseline_ema_gamma,
        use_baseline=cfg.use_role_baseline,
        trained_agents={POLICY},  # never train on turns sampled by frozen opponents
    )
    datums, assemble_metrics = assemble(
        episodes, advantages, gamma=cfg.gamma, filter_zero_adv=cfg.filter_zero_adv
    )
    timings["time/prepare_datums"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    loss_fn = functools.partial(get_loss(cfg.loss_fn), clip=cfg.ppo_clip)
    train_metrics: dict[str, float] = {}
    if datums:
        train_metrics.update(learner.forward_backward(datums, loss_fn))
    train_metrics.update(learner.optim_step(cfg.learning_rate))
    timings["time/train"] = time.perf_counter() - t2

    sampled = sum(len(t.completion.tokens) for ep in episodes for t in ep.turns if t.completion)
    prompt_tokens = sum(len(t.prompt_ids) for ep in episodes for t in ep.turns)
    metrics: dict[str, float] = {
        "progress/step": float(step),
        "progress/done_frac": (step + 1) / cfg.num_steps,
        "optim/lr": cfg.learning_rate,
        "perf/sample_tokens_per_s": sampled / max(timings["time/sample"], 1e-9),
        "perf/prompt_tokens_per_s": prompt_tokens / max(timings["time/sample"], 1e-9),
        "perf/train_tokens_per_s": (prompt_tokens + sampled) / max(timings["time/train"], 1e-9),
        **episode_metrics(episodes, prefix="train", trained_agent=POLICY),
        **rollout_metrics,
        **rae_metrics,
        **{f"train/{k}": v for k, v in assemble_metrics.items()},
        **{f"train/{k}": v for k, v in train_metrics.items()},
        **timings,
    }
    metrics["time/total"] = time.perf_counter() - t0
    return metrics, new_baselines, episodes


def _resume_point(cfg: TrainConfig, run_dir: Path) -> Path | None:
    if cfg.load_checkpoint_path:
        return Path(cfg.load_checkpoint_path)
    return latest_checkpoint(run_dir / "checkpoints")


def train(
    cfg: TrainConfig,
    setup: RunSetup,
    make_learner: Callable[[], Learner],
    log: Callable[[str], None] = print,
) -> RunResult:
    """Run (or resume) training as configured; returns where it stopped."""
    run_dir = setup.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(cfg.to_json(), indent=2), encoding="utf-8")
    learner = make_learner()
    learner.temperature = cfg.temperature  # type: ignore[attr-defined]
    start, baselines = 0, Baselines({})
    resume = _resume_point(cfg, run_dir)
    if resume is not None:
        state = load_loop_state(resume)
        learner.load(resume / "learner")
        start, baselines = state.step, Baselines.from_json(state.baselines)
        log(f"resumed from {resume} at step {start}")
    jsonl = JsonlSink(run_dir / "metrics.jsonl")
    jsonl.truncate_after(start - 1)  # rows past the checkpoint belong to a lost future
    sinks = MultiSink([jsonl, *build_sinks(cfg, run_dir)])
    evaluate = make_eval_fn(cfg, setup)

    def checkpoint(next_step: int, final: bool = False) -> Path:
        state = LoopState(next_step, baselines.to_json(), cfg.to_json(), {})
        return save_checkpoint(run_dir / "checkpoints", state, learner.save, final=final)

    metrics: dict[str, float] = {}
    step = start
    started = time.perf_counter()
    try:
        for step in range(start, cfg.num_steps):
            if cfg.eval_every and step % cfg.eval_every == 0:
                sinks.log(evaluate(learner, step), step)
            metrics, baselines, episodes = train_step(cfg, setup, learner, step, baselines)
            if cfg.transcripts_per_step:
                write_transcripts(
                    episodes, run_dir / "transcripts", step, limit=cfg.transcripts_per_step
                )
            sinks.log(metrics, step)
            log(format_progress(step + 1, cfg.num_steps, metrics, time.perf_counter() - started))
            if cfg.save_every and (step + 1) % cfg.save_every == 0 and step + 1 < cfg.num_steps:
                checkpoint(step + 1)
        step = cfg.num_steps
        if cfg.eval_every:
            final_eval = evaluate(learner, step)
            sinks.log(final_eval, step)
            metrics.update(final_eval)
        path = checkpoint(step, final=True)
        log(f"final checkpoint: {path}")
    except KeyboardInterrupt:
        path = checkpoint(step)
        log(f"\ninterrupted: saved {path}; run the same command again to resume")
        return RunResult(run_dir, step, metrics, interrupted=True)
    finally:
        sinks.close()
    return RunResult(run_dir, step, metrics)
