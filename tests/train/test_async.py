"""The asynchronous actor-learner on a real local Ray instance with a tiny model made
here: the staleness bound, monotonic versions, an actor killed mid-batch, resume.

Runs when the `ray` extra is installed (it is in the Makefile's extras), skipped otherwise.
"""

from __future__ import annotations

import importlib.util
import os
import signal
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from spiral.report.sinks import read_jsonl  # noqa: E402
from spiral.train.actors.collector import AsyncCollector  # noqa: E402
from spiral.train.config import parse_config  # noqa: E402
from spiral.train.loop import train  # noqa: E402
from spiral.train.setup import build_setup, make_learner_factory  # noqa: E402
from spiral.train.step import step_specs  # noqa: E402


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from spiral.testing import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def local_ray():  # type: ignore[no-untyped-def]
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    yield
    ray.shutdown()


def async_args(model: Path, log_path: Path, steps: int, *extra: str) -> list[str]:
    return [
        f"model_name={model}",
        "env_ids=KuhnPokerSingle-v0,TicTacToe-v0",
        "answer_format=constrained",
        "batch_size=8",
        f"max_steps={steps}",
        "max_tokens=6",
        "lora_rank=4",
        "learning_rate=1e-2",
        "eval_every=0",
        "save_every=2",
        "template=chat",
        f"log_path={log_path}",
        "use_async_actor_learner=true",
        *extra,
    ]


def _train(model: Path, log_path: Path, steps: int, *extra: str) -> list[dict]:
    cfg = parse_config(async_args(model, log_path, steps, *extra))
    train(cfg, build_setup(cfg), make_learner_factory(cfg), log=lambda _: None)
    return read_jsonl(log_path / "metrics.jsonl")


@pytest.mark.usefixtures("local_ray")
def test_no_game_older_than_the_bound_is_trained_on_and_versions_rise(
    tiny_model: Path, tmp_path: Path
) -> None:
    # Two actors fill a buffer of three steps' games, so games wait there for two or
    # three versions: the bound of 1 must drop them rather than train on them.
    rows = _train(
        tiny_model,
        tmp_path / "run",
        5,
        "num_actors=2",
        "replay_buffer_max_staleness=1",
        "replay_buffer_size=12",
    )
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    versions = [r["async/policy_version"] for r in rows]
    assert versions == [0.0, 1.0, 2.0, 3.0, 4.0]  # one optimizer step per step
    for row in rows:
        assert row["async/staleness_max"] <= 1
        ages = {int(k.split("/")[2]) for k in row if k.startswith("train/staleness/")}
        assert ages <= {0, 1}
        assert row["train/assemble/num_datums"] > 0
    assert rows[-1]["replay_buffer/dropped_stale"] > 0
    assert any(row["async/staleness_max"] == 1 for row in rows[1:])
    if importlib.util.find_spec("matplotlib") is not None:  # the report draws them
        from spiral.report.plots import plot_learning_curve

        drawn = {p.stem for p in plot_learning_curve(tmp_path / "run" / "metrics.jsonl", tmp_path)}
        assert {"async_waits", "async_staleness"} <= drawn


@pytest.mark.usefixtures("local_ray")
def test_staleness_zero_trains_only_on_the_current_weights(
    tiny_model: Path, tmp_path: Path
) -> None:
    rows = _train(tiny_model, tmp_path / "run", 3, "replay_buffer_max_staleness=0")
    assert all(row["async/staleness_max"] == 0 for row in rows)
    assert all(row["replay_buffer/dropped_stale"] == 0 for row in rows)


@pytest.mark.usefixtures("local_ray")
def test_a_killed_actor_is_replaced_and_its_games_are_dropped_whole(
    tiny_model: Path, tmp_path: Path
) -> None:
    # Free-text answers of 24 tokens and 16 games: a batch takes long enough to be killed in.
    cfg = parse_config(
        [
            *async_args(tiny_model, tmp_path / "run", 3, "actor_max_restarts=2"),
            "answer_format=bracket",
            "max_tokens=24",
            "batch_size=32",
        ]
    )
    learner = make_learner_factory(cfg)()
    logged: list[str] = []
    with AsyncCollector(cfg, build_setup(cfg), 0, logged.append) as collector:
        first_pid = ray.get(collector.actors[0].where.remote())["pid"]
        episodes, metrics = collector(learner, 0)
        assert len(episodes) == cfg.games_per_step and metrics["async/actor_failures"] == 0
        assert collector.flights  # the next batch is already being played
        os.kill(first_pid, signal.SIGKILL)
        episodes, metrics = collector(learner, 1)
        second_pid = ray.get(collector.actors[0].where.remote())["pid"]
    assert second_pid != first_pid  # Ray restarted the actor in a new process
    assert metrics["async/actor_failures"] == 1
    assert metrics["async/games_lost"] == cfg.games_per_step  # the whole batch, no part
    assert len(episodes) == cfg.games_per_step
    # Nothing of the killed batch (batch index 1) reaches the learner; all else is whole.
    lost_seeds = {spec.seed for spec in step_specs(cfg, 1, {}, cfg.games_per_step)}
    assert not lost_seeds & {ep.seed for ep in episodes}
    for ep in episodes:
        assert ep.outcome in ("win", "draw", "truncated", "invalid")
        assert ep.turns and sum(ep.returns) == pytest.approx(
            -1.0 if ep.offender is not None else 0.0
        )
    assert any("died" in line for line in logged)


@pytest.mark.usefixtures("local_ray")
def test_resume_starts_the_actors_from_the_checkpoint_version(
    tiny_model: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    _train(tiny_model, run, 2)
    rows = _train(tiny_model, run, 4)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    # The resumed learner is at version 2 and its first games were played by it.
    assert rows[2]["async/policy_version"] == 2.0
    assert rows[2]["async/staleness_max"] == 0


@pytest.mark.usefixtures("local_ray")
def test_full_fine_tuning_sends_every_weight(tiny_model: Path, tmp_path: Path) -> None:
    cfg = parse_config([*async_args(tiny_model, tmp_path / "run", 2), "lora_rank=0"])
    learner = make_learner_factory(cfg)()
    state = learner.trained_state()
    assert len(state) == sum(1 for _ in learner.model.parameters())  # type: ignore[attr-defined]
    with AsyncCollector(cfg, build_setup(cfg), 0, lambda _: None) as collector:
        episodes, _ = collector(learner, 0)
        learner.version = 7  # as if trained: the next batches must carry version 7
        collector._publish(learner)
        collector.buffer.clear()
        collector.flights.clear()
        episodes, metrics = collector(learner, 1)
    assert metrics["async/policy_version"] == 7
    assert {t.policy_version for ep in episodes for t in ep.turns} == {7}


@pytest.mark.usefixtures("local_ray")
def test_population_play_runs_in_the_actors(tiny_model: Path, tmp_path: Path) -> None:
    from spiral.train.population import pool_at

    run = tmp_path / "run"
    rows = _train(
        tiny_model,
        run,
        5,
        "num_actors=2",
        "fsp_enabled=true",
        "fsp_update_interval=2",
        "fsp_pool_size=2",
        "fsp_fixed_opponents=random",
        "replay_buffer_max_staleness=2",
    )
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    for row in rows:  # the learner's pool follows the schedule, as in the sync loop
        expected = pool_at(int(row["step"]), 0, 2, 2)
        assert row["fsp/pool_size"] == len(expected.members)
        assert row["async/staleness_max"] <= 2
    # The actors met pool members and the fixed member; the league rated them.
    met = sum(r["fsp/members_met"] for r in rows)
    assert met > 0 and any(r["fsp/fixed_opponent_ratio"] > 0 for r in rows)
    assert (run / "league.json").is_file()
    assert any(k.startswith("league/step_") for k in rows[-1])
    # Only the policy's turns are trained: a member's sampled turns are skipped.
    for row in rows:
        if row["fsp/members_met"] > 0:
            assert row["train/assemble/num_skipped_turns"] > 0


@pytest.mark.usefixtures("half_precision")
def test_an_actor_holds_only_what_it_samples_with(tiny_model: Path, tmp_path: Path) -> None:
    """Full fine-tuning in bf16: the learner keeps fp32 master weights, an actor's copy
    holds them in bf16 (half the bytes), refuses to train, and plays with the learner's
    weights rounded to bf16."""
    import torch

    from spiral.train.actors.worker import RolloutWorker

    args = [*async_args(tiny_model, tmp_path / "run", 2), "lora_rank=0", "dtype=bfloat16"]
    cfg = parse_config(args)
    learner = make_learner_factory(cfg)()
    worker = RolloutWorker(cfg, build_setup(cfg), num_threads=1)
    mine = dict(worker.learner.model.named_parameters())  # type: ignore[attr-defined]
    theirs = dict(learner.model.named_parameters())  # type: ignore[attr-defined]
    assert {p.dtype for p in theirs.values()} == {torch.float32}
    assert {p.dtype for p in mine.values()} == {torch.bfloat16}
    with torch.no_grad():
        for p in theirs.values():
            p.add_(0.01)  # as if trained
    episodes, _ = worker.play(0, 4, [learner.trained_state()], version=3)
    assert episodes and {t.policy_version for ep in episodes for t in ep.turns} == {3}
    for name, p in theirs.items():
        assert torch.equal(mine[name], p.detach().to(torch.bfloat16)), name
    with pytest.raises(RuntimeError, match="only samples"):
        worker.learner.optim_step(1e-3)
