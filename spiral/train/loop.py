"""The synchronous self-play loop, top to bottom.

    play_games -> rae_advantages -> assemble -> forward_backward + optim_step
    -> new sampler -> log, evaluate (every k), checkpoint (every m)

Every seed is derived from (`seed`, step), so a run resumed from a checkpoint replays the
same games and reaches the same metrics as an uninterrupted run. Ctrl-C or SIGTERM finishes
the step in flight, saves a checkpoint of that moment and exits (`stopping.py`); a second
Ctrl-C abandons the step, and resume replays it from the last checkpoint.

Under torchrun (`Ranks` with world > 1) every rank runs this loop: each plays its share of
the games and trains its share of the rows (`data_parallel.py`); rank 0 alone logs,
evaluates and writes; all ranks agree on when to stop.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spiral.algo.rae import Baselines
from spiral.engines.base import AVERAGED, MAGNET, Learner
from spiral.engines.torch.parallel.distributed import Ranks
from spiral.errors import SpiralError
from spiral.report.console import format_eval, format_progress
from spiral.report.run_info import write_run_info
from spiral.report.sinks import JsonlSink, MultiSink
from spiral.report.transcripts import Decode, write_transcripts
from spiral.train.averaging import WeightAverage
from spiral.train.checkpoint import LoopState, latest_checkpoint, save_checkpoint
from spiral.train.config import TrainConfig
from spiral.train.magnet import SnapshotMagnet
from spiral.train.population import MEMBER_PREFIX, Population, members_in_checkpoints
from spiral.train.resume import remove_partial_writes, restore, stretched_schedules
from spiral.train.run_lock import run_lock
from spiral.train.setup import RunSetup, build_sinks, make_eval_fn
from spiral.train.step import (
    POLICY,
    Collector,
    collect,
    full_width_step,
    step_specs,
    train_step,
)
from spiral.train.stopping import StopRequest
from spiral.train.weights_check import check_finite_weights

__all__ = ["POLICY", "RunResult", "TrainingDivergedError", "collect", "step_specs", "train"]


class TrainingDivergedError(SpiralError, FloatingPointError):
    """Too many consecutive updates with NaN/inf losses or gradients."""


@dataclass
class RunResult:
    run_dir: Path
    steps_done: int
    last_metrics: dict[str, float]
    interrupted: bool = False


@contextlib.contextmanager
def open_collector(
    cfg: TrainConfig,
    setup: RunSetup,
    first_step: int,
    log: Callable[[str], None],
    ranks: Ranks | None = None,
) -> Iterator[Collector]:
    """Where the steps' games come from: played here with the learner's weights (the
    default; shared out over the ranks of a torchrun launch), or by Ray actors through a
    replay buffer (`use_async_actor_learner`)."""
    if ranks is not None and ranks.world > 1:
        from spiral.train.data_parallel import sharded_play

        yield functools.partial(collect, cfg, setup, play=sharded_play(ranks))
        return
    if cfg.actors is None:
        yield functools.partial(collect, cfg, setup)
        return
    from spiral.train.actors.collector import AsyncCollector  # Ray is an optional extra

    with AsyncCollector(cfg, setup, first_step, log) as collector:
        yield collector


def stepper(cfg: TrainConfig, setup: RunSetup, learner: Learner) -> Callable[..., Any]:
    """How a step turns the weights into an update: games played (`train_step`, from the
    collector), or with `rollout=full_width` the whole tree expanded (`full_width_step`;
    the tree is built here, once)."""
    if cfg.learning.rollout != "full_width":
        return functools.partial(train_step, cfg, setup)
    from spiral.engines.base import SamplingParams
    from spiral.train.full_width import FullWidth

    params = SamplingParams(max_tokens=cfg.max_tokens, temperature=cfg.temperature)
    exact = FullWidth(cfg, setup.policy(learner.sampler(), params, POLICY), setup.game_params)

    def take(
        learner: Learner,
        step: int,
        baselines: Baselines,
        population: Population | None,
        collector: Collector,
        average: WeightAverage | None,
    ) -> tuple[dict[str, float], Baselines, list[Any]]:
        del collector  # nothing is played
        return full_width_step(cfg, exact, learner, step, baselines, population, average)

    return take


def _print_flushed(line: str) -> None:
    print(line, flush=True)


def _silent(line: str) -> None:  # the log of ranks other than 0
    del line


def _no_eval(
    learner: Learner,
    step: int,
    population: Population | None = None,
    average: WeightAverage | None = None,
) -> dict[str, float]:
    del learner, step, population  # ranks other than 0 do not evaluate
    return {}


def prompt_decoder(learner: Learner) -> Decode | None:
    """Reads the prompts of the policy and its pool members (one base, one tokenizer) back
    as the text the model read, for the replays; None for an engine that keeps no
    tokenizer here. Fixed opponents (a checkpoint of another base, an API model) are not
    decoded: their tokenizer may differ."""
    tokenizer = getattr(learner, "tokenizer", None)
    if tokenizer is None:
        return None

    def decode(agent: str, ids: list[int]) -> str | None:
        if agent != POLICY and not agent.startswith(MEMBER_PREFIX):
            return None
        return str(tokenizer.decode(ids, skip_special_tokens=False))

    return decode


def _open_run_files(cfg: TrainConfig, run_dir: Path, start: int) -> MultiSink:
    """The run's config and run info, and its metrics sinks from `start` on (rank 0's)."""
    # Written only once the resume checks passed: a refused resume keeps the old config.
    (run_dir / "config.json").write_text(json.dumps(cfg.to_json(), indent=2), encoding="utf-8")
    write_run_info(run_dir)
    jsonl = JsonlSink(run_dir / "metrics.jsonl")
    jsonl.truncate_after(start - 1)  # rows past the checkpoint belong to a lost future
    return MultiSink([jsonl, *build_sinks(cfg, run_dir)])


@dataclass
class _Start:
    learner: Learner | None  # None: the checkpoint already finished the run
    step: int
    baselines: Baselines
    population: Population | None
    average: WeightAverage | None = None
    folder: Path | None = None  # the checkpoint resumed from


def _begin(
    cfg: TrainConfig,
    run_dir: Path,
    make_learner: Callable[[], Learner],
    log: Callable[[str], None],
) -> _Start:
    """The learner, first step, baselines and population: from the newest intact
    checkpoint, or fresh."""
    restored = restore(cfg, run_dir / "checkpoints", make_learner, log)
    decay = cfg.learning.weight_ema_decay
    if restored is None:
        learner = make_learner()
        check_finite_weights(learner, cfg.model_name)  # NaN from the start: not the lr's
        population = _population(cfg, run_dir, learner, {}, run_dir)
        average = WeightAverage(decay) if decay > 0 else None
        return _Start(learner, 0, Baselines({}), population, average)
    state = restored.state
    if state.step >= cfg.num_steps:
        log(
            f"{restored.folder} is at step {state.step} of {cfg.num_steps}: the run is "
            "finished, nothing to do (raise max_steps to train further)"
        )
        return _Start(None, state.step, Baselines({}), None)
    check_finite_weights(restored.learner, cfg.model_name)
    log(f"resumed from {restored.folder} at step {state.step}")
    stretched = stretched_schedules(state.config, cfg, state.step)
    if stretched:
        log(stretched)
    saved_t = state.config.get("temperature", cfg.temperature)
    if saved_t != cfg.temperature:
        log(f"temperature {saved_t} -> {cfg.temperature}: sampling and scoring now use it")
    source = restored.folder.parent.parent  # the run folder the checkpoint came from
    population = _population(cfg, run_dir, restored.learner, state.extra, source)
    average = None
    if decay > 0:  # the saved average continues; without one, averaging restarts
        saved = restored.folder / "learner" / AVERAGED
        average = WeightAverage.load(saved, restored.learner, decay) or WeightAverage(decay)
    baselines = Baselines.from_json(state.baselines)
    return _Start(restored.learner, state.step, baselines, population, average, restored.folder)


def _population(
    cfg: TrainConfig, run_dir: Path, learner: Learner, extra: dict[str, Any], source: Path
) -> Population | None:
    """Population play's state (fsp_enabled): the pool's members come back from the run
    folder the checkpoint was written in."""
    if cfg.population is None:
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
    if bad_steps >= cfg.learning.max_bad_steps:
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
    ranks: Ranks | None = None,
) -> RunResult:
    """Run (or resume) training as configured; returns where it stopped. `log` gets one
    line per step and per evaluation (default: stdout, flushed, so `make train > log.txt`
    shows each line as it happens). `ranks`: this process's place in a torchrun launch."""
    ranks = ranks or Ranks()
    with run_lock(setup.run_dir) if ranks.main else contextlib.nullcontext():
        return _train(cfg, setup, make_learner, log, ranks)


def _train(
    cfg: TrainConfig,
    setup: RunSetup,
    make_learner: Callable[[], Learner],
    log: Callable[[str], None] | None,
    ranks: Ranks,
) -> RunResult:
    """`train`, with the run folder held (run_lock.py)."""
    log = (log or _print_flushed) if ranks.main else _silent
    run_dir = setup.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt_dir = run_dir / "checkpoints"
    if ranks.main and (removed := remove_partial_writes(ckpt_dir)):
        log(f"removed {removed} unfinished checkpoint write(s) left by a killed run")
    ranks.barrier()  # the others read the checkpoints once rank 0 has cleaned them
    begun = _begin(cfg, run_dir, make_learner, log)
    learner, start, baselines, population, average = (
        begun.learner,
        begun.step,
        begun.baselines,
        begun.population,
        begun.average,
    )
    if learner is None:
        return RunResult(run_dir, start, {})
    magnet = None
    if cfg.regularizer.kl_reference == "snapshot":
        reg = cfg.regularizer
        magnet = SnapshotMagnet(learner, reg.kl_magnet_interval, reg.kl_magnet_settle)
        if begun.folder is not None:
            magnet.load(begun.folder / "learner" / MAGNET)
    if population is not None:
        population.writes = ranks.main
    # After any load: the learner scores at the temperature the sampler draws at.
    learner.temperature = cfg.temperature
    sinks = _open_run_files(cfg, run_dir, start) if ranks.main else MultiSink([])
    evaluate = make_eval_fn(cfg, setup) if ranks.main else _no_eval

    def save_learner(path: Path) -> None:
        learner.save(path)
        if average is not None and average.count:
            average.save(path / AVERAGED, learner)
        if magnet is not None:
            magnet.save(path / MAGNET)

    def checkpoint(next_step: int, final: bool = False) -> Path:
        learner.before_main_alone(checkpoint=True)  # FSDP: rank 0 writes whole tensors
        path = ckpt_dir
        if ranks.main:
            extra = population.to_json() if population is not None else {}
            state = LoopState(next_step, baselines.to_json(), cfg.to_json(), extra)
            path = save_checkpoint(ckpt_dir, state, save_learner, final=final)
            if population is not None:
                population.prune_folders(members_in_checkpoints(ckpt_dir))
        ranks.barrier()  # no rank runs ahead of a checkpoint it may resume from
        return path

    metrics: dict[str, float] = {}
    step, bad_steps = start, 0
    started = time.perf_counter()
    take_step = stepper(cfg, setup, learner)
    with StopRequest(log) as stop, open_collector(cfg, setup, start, log, ranks) as collector:
        try:
            for step in range(start, cfg.num_steps):
                if population is not None:
                    population.begin_step(learner, step)
                if magnet is not None and magnet.due(step):
                    magnet.refresh()
                if cfg.eval_every and step % cfg.eval_every == 0:
                    learner.before_main_alone()  # FSDP: rank 0 evaluates alone
                    found = evaluate(learner, step, population, average)
                    sinks.log(found, step)
                    log(format_eval(step, found))
                metrics, baselines, episodes = take_step(
                    learner, step, baselines, population, collector, average
                )
                if cfg.logging.transcripts_per_step and ranks.main:
                    write_transcripts(
                        episodes,
                        run_dir / "transcripts",
                        step,
                        limit=cfg.logging.transcripts_per_step,
                        decode=prompt_decoder(learner),
                    )
                if magnet is not None:
                    magnet.observe(metrics)
                sinks.log(metrics, step)
                elapsed = time.perf_counter() - started
                log(format_progress(step + 1, cfg.num_steps, metrics, elapsed, first=start))
                bad_steps = _count_bad_steps(cfg, metrics, bad_steps, step, log)
                last = step + 1 == cfg.num_steps
                scheduled = bool(cfg.save_every) and (step + 1) % cfg.save_every == 0
                stopping = ranks.any(stop.requested)  # every rank stops after the same step
                if (scheduled or stopping) and not last:
                    path = checkpoint(step + 1)
                    if stopping:
                        by = stop.signal_name or "another rank's signal"
                        log(f"stopped by {by}: saved {path}; run the same "
                            "command again to resume")  # fmt: skip
                        return RunResult(run_dir, step + 1, metrics, interrupted=True)
            step = cfg.num_steps
            if cfg.eval_every:
                learner.before_main_alone()
                final_eval = evaluate(learner, step, population, average)
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
