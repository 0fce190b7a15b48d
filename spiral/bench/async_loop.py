"""Sync loop vs the async actor-learner on one machine: the same workload, one run.

`run_async_benchmark()` trains `warmup + steps` steps of a preset twice, in this process:

- `sync`: the sync loop with every thread of the machine (`threads`): sampling and
  learning take turns on all of them;
- `async`: one Ray actor with `threads // 2` threads samples while the learner learns
  with the other half (staleness 1: the actor plays step k+1 while step k is learnt).

Per mode, over the steps after the warm-up: seconds per step, games/s, trained tokens
per second of wall time, and the time each side waits (the learner for games,
`async/wait_s`; the actor for work, `actor/idle_s`). The honest ratio on a CPU is
`async_over_sync/games_per_s`: both loops share the same cores, so overlap only pays
if neither half would use all of them well.

The model (`model/*`) answers what the overlap is worth when sampler and learner each
have their own device as fast as the machine was for the sync loop: a sync step costs
sample + learn, an async step max(sample, learn) + the learner's time to hand its weights
over; the sample and learn times are the sync run's. Published anchors for that setting
(AReaL, verl, ROLL, PipelineRL) report 1.2-2.8x.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from spiral.report.sinks import read_jsonl
from spiral.train.config import parse_config
from spiral.train.loop import train
from spiral.train.setup import build_setup, make_learner_factory


def _mean(rows: Sequence[dict[str, float]], key: str) -> float:
    values = [float(r[key]) for r in rows if key in r]
    return sum(values) / len(values) if values else 0.0


def _summary(rows: Sequence[dict[str, float]], games_per_step: int) -> dict[str, float]:
    step_s = _mean(rows, "time/total")
    trained = [r["perf/train_tokens_per_s"] * r["time/train"] for r in rows]
    return {
        "step_s": step_s,
        "games_per_s": games_per_step / step_s,
        "trained_tokens_per_s": sum(trained) / sum(r["time/total"] for r in rows),
        "sample_s": _mean(rows, "time/sample"),  # async: the learner's wait for games
        "learn_s": _mean(rows, "time/train"),
    }


def _run(args: Sequence[str], threads: int, steps: int, warmup: int) -> list[dict[str, float]]:
    import torch

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory(prefix="spiral-bench-async-") as tmp:
        cfg = parse_config(
            [
                *args,
                f"max_steps={warmup + steps}",
                "eval_every=0",
                "save_every=0",
                f"log_path={Path(tmp) / 'run'}",
            ]  # fmt: skip
        )
        train(cfg, build_setup(cfg), make_learner_factory(cfg), log=lambda _: None)
        rows = read_jsonl(Path(tmp) / "run" / "metrics.jsonl")
    return [r for r in rows if r["step"] >= warmup]


def run_async_benchmark(
    preset: str = "embedded-kuhn",
    model: str = "embedded",
    steps: int = 6,
    warmup: int = 2,
    threads: int = 2,
    extra: Sequence[str] = (),
) -> dict[str, float]:
    """Seconds per step, games/s and waits of the sync and the async loop on `preset`."""
    import torch

    # the async actors play sampled games, so both loops sample
    base = [f"preset={preset}", f"model_name={model}", "rollout=sampled", *extra]
    games_per_step = parse_config(base).games_per_step
    before = torch.get_num_threads()
    t0 = time.perf_counter()
    try:
        sync_rows = _run(base, threads, steps, warmup)
        half = max(1, threads // 2)
        async_args = [
            *base,
            "use_async_actor_learner=true",
            "num_actors=1",
            f"actor_num_cpus={half}",
            "replay_buffer_max_staleness=1",
            "loss_fn=ppo",
        ]
        async_rows = _run(async_args, half, steps, warmup)
    finally:
        torch.set_num_threads(before)
    out: dict[str, float] = {"async/steps": float(steps), "async/threads": float(threads)}
    sync, asyn = _summary(sync_rows, games_per_step), _summary(async_rows, games_per_step)
    out.update({f"async/sync/{k}": v for k, v in sync.items()})
    out.update({f"async/async/{k}": v for k, v in asyn.items()})
    out["async/async/learner_wait_s"] = _mean(async_rows, "async/wait_s")
    out["async/async/actor_idle_s"] = _mean(async_rows, "actor/idle_s")
    out["async/async/actor_play_s"] = _mean(async_rows, "actor/play_s")
    out["async/async/publish_s"] = _mean(async_rows, "async/publish_s")
    out["async/async/staleness_mean"] = _mean(async_rows, "async/staleness_mean")
    out["async/async_over_sync/games_per_s"] = asyn["games_per_s"] / sync["games_per_s"]
    out["async/async_over_sync/trained_tokens_per_s"] = (
        asyn["trained_tokens_per_s"] / sync["trained_tokens_per_s"]
    )
    sample, learn = sync["sample_s"], sync["learn_s"]
    modelled = max(sample, learn) + out["async/async/publish_s"]
    out["async/model/own_devices_step_s"] = modelled
    out["async/model/own_devices_speedup"] = (sample + learn) / modelled
    out["async/seconds"] = time.perf_counter() - t0
    return out
