"""Stopping and resuming a run: Ctrl-C / SIGTERM finish the step in flight and save that
consistent moment; a second Ctrl-C abandons the step; resume refuses changed meanings,
cleans killed writes, and a finished run is left alone."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from spiral.engines.base import Learner
from spiral.report.sinks import read_jsonl
from spiral.train.checkpoint import latest_checkpoint, load_loop_state
from spiral.train.config import ConfigError, parse_config
from spiral.train.loop import RunResult, train
from spiral.train.resume import check_resume_config
from spiral.train.setup import build_setup, make_learner_factory

from .test_e2e import _assert_rows_close, tiny_args, tiny_model  # noqa: F401  (fixture)


def _cfg(model: Path, run: Path, steps: int, *extra: str):  # type: ignore[no-untyped-def]
    return parse_config([*tiny_args(model, run, steps, envs="KuhnPokerSingle-v0"), *extra])


def _signalling(cfg, signals: list[int], at_call: int) -> Callable[[], Learner]:  # type: ignore[no-untyped-def]
    """A learner factory whose `at_call`-th optimizer step receives `signals` first."""
    build = make_learner_factory(cfg)

    def factory() -> Learner:
        learner = build()
        real, calls = learner.optim_step, [0]

        def optim_step(lr: float) -> dict[str, float]:
            calls[0] += 1
            if calls[0] == at_call:
                for signum in signals:
                    os.kill(os.getpid(), signum)
            return real(lr)

        learner.optim_step = optim_step  # type: ignore[method-assign]
        return learner

    return factory


def _train(cfg, factory: Callable[[], Learner] | None = None) -> RunResult:  # type: ignore[no-untyped-def]
    return train(cfg, build_setup(cfg), factory or make_learner_factory(cfg), log=lambda _: None)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signal_mid_step_saves_that_step_and_resumes_exactly(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
    signum: int,
) -> None:
    handler_before = signal.getsignal(signal.SIGINT)  # SIG_IGN under nohup, say
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    _train(_cfg(tiny_model, straight, 4))
    cfg = _cfg(tiny_model, stopped, 4)
    result = _train(cfg, _signalling(cfg, [signum], at_call=2))  # inside step 1
    assert result.interrupted and result.steps_done == 2
    # The checkpoint says "next step 2" and holds the weights after step 1.
    assert load_loop_state(latest_checkpoint(stopped / "checkpoints")).step == 2
    _train(cfg)
    _assert_rows_close(
        read_jsonl(straight / "metrics.jsonl"), read_jsonl(stopped / "metrics.jsonl")
    )
    leftovers = [p.name for p in (stopped / "checkpoints").iterdir() if p.name.startswith(".")]
    assert leftovers == [] and not list((stopped / "checkpoints").glob("*superseded*"))
    assert signal.getsignal(signal.SIGINT) == handler_before  # restored


def test_second_ctrl_c_abandons_the_step(tiny_model: Path, tmp_path: Path) -> None:  # noqa: F811
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    _train(_cfg(tiny_model, straight, 3, "save_every=1"))
    cfg = _cfg(tiny_model, stopped, 3, "save_every=1")
    result = _train(cfg, _signalling(cfg, [signal.SIGINT, signal.SIGINT], at_call=2))
    assert result.interrupted and result.steps_done == 1  # step 1 was abandoned
    assert load_loop_state(latest_checkpoint(stopped / "checkpoints")).step == 1
    _train(cfg)
    _assert_rows_close(
        read_jsonl(straight / "metrics.jsonl"), read_jsonl(stopped / "metrics.jsonl")
    )


def test_finished_run_is_left_alone(tiny_model: Path, tmp_path: Path) -> None:  # noqa: F811
    run = tmp_path / "run"
    _train(_cfg(tiny_model, run, 2))
    before = sorted(p.name for p in (run / "checkpoints").iterdir())
    rows = (run / "metrics.jsonl").read_text()
    result = _train(_cfg(tiny_model, run, 2))
    assert result.steps_done == 2 and not result.interrupted
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == before
    assert (run / "metrics.jsonl").read_text() == rows  # no duplicated final evaluation


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ("batch_size=8", "batch_size"),
        ("env_ids=TicTacToe-v0", "env_ids"),
        ("lora_rank=8", "lora_rank"),
        ("lora_rank=0", "lora_rank"),
    ],
)
def test_resume_refuses_a_changed_meaning(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
    change: str,
    key: str,
) -> None:
    run = tmp_path / "run"
    _train(_cfg(tiny_model, run, 2))
    config = (run / "config.json").read_text()
    with pytest.raises(ConfigError, match=f"{key}=") as err:
        _train(_cfg(tiny_model, run, 4, change))
    assert "put" in str(err.value) or "pass" in str(err.value)  # says how to fix it
    assert (run / "config.json").read_text() == config  # a refused resume changes nothing


def test_resume_allows_extending_and_cleans_killed_writes(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    _train(_cfg(tiny_model, run, 2))
    killed = run / "checkpoints" / ".tmp-step_000004-12345"
    (killed / "learner").mkdir(parents=True)
    _train(_cfg(tiny_model, run, 3, "eval_every=1", "temperature=1.3"))
    assert not killed.exists()
    assert json.loads((run / "config.json").read_text())["max_steps"] == 3
    assert load_loop_state(latest_checkpoint(run / "checkpoints")).step == 3


def _parse(model: Path, *extra: str):  # type: ignore[no-untyped-def]
    return parse_config([f"model_name={model}", "env_ids=TicTacToe-v0", *extra])


def test_a_key_newer_than_the_run_folder_counts_as_its_default(tiny_model: Path) -> None:  # noqa: F811
    new = _parse(tiny_model).to_json()
    older = {k: v for k, v in new.items() if k != "lr_kl_target"}
    check_resume_config(older, new, same_run=True)  # the default: what the run did
    changed = _parse(tiny_model, "lr_kl_target=0.05")
    with pytest.raises(ConfigError, match="lr_kl_target=0.0 to continue"):
        check_resume_config(older, changed.to_json(), same_run=True)
    # An async run folder from before the key trained without it; the async loop's
    # default now sets it, so the same command is refused with the value to pass.
    old_async = {**older, "use_async_actor_learner": True}
    with pytest.raises(ConfigError, match="lr_kl_target=0.0 to continue"):
        check_resume_config(
            old_async, _parse(tiny_model, "use_async_actor_learner=true").to_json(), True
        )
    again = _parse(tiny_model, "use_async_actor_learner=true", "lr_kl_target=0.0")
    check_resume_config(old_async, again.to_json(), same_run=True)


def test_a_retired_key_resumes_where_the_run_used_what_remains(tiny_model: Path) -> None:  # noqa: F811
    """A run folder saved before options were retired: the keys it wrote at the value
    Spiral still does (or exact shortcuts at any value) resume; another value is refused."""
    new = _parse(tiny_model, "kl_coef=0.1").to_json()
    saved = {**new, "lr_staleness": "constant", "kl_direction": "reverse", "share_prefix": False}
    check_resume_config(saved, new, same_run=True)
    forward = {**saved, "kl_direction": "forward"}
    with pytest.raises(ConfigError, match="kl_direction=forward, an option this version"):
        check_resume_config(forward, new, same_run=True)
    check_resume_config(forward, new, same_run=False)  # a new run from its checkpoint
    no_kl = _parse(tiny_model).to_json()  # a direction without a KL changed nothing
    check_resume_config({**no_kl, "kl_direction": "forward"}, no_kl, same_run=True)
    with pytest.raises(ConfigError, match="loss_fn=truncated_importance_sampling"):
        check_resume_config({**new, "loss_fn": "truncated_importance_sampling"}, new, True)


def test_a_resume_between_magnet_refreshes_continues_exactly(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """With the KL to a snapshot and constrained answers, the magnet's distributions are
    kept between refreshes (magnet_memo.py); a run resumed between two refreshes starts
    with nothing kept and must still train on the same numbers."""
    keys = ("answer_format=constrained", "kl_coef=0.5", "kl_reference=snapshot")
    keys += ("kl_magnet_interval=4", "entropy_coef=0.1", "save_every=2", "eval_every=0")
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    _train(_cfg(tiny_model, straight, 6, *keys))
    _train(_cfg(tiny_model, resumed, 3, *keys))  # stops after step 3: the magnet is from step 0
    _train(_cfg(tiny_model, resumed, 6, *keys))
    rows_a, rows_b = read_jsonl(straight / "metrics.jsonl"), read_jsonl(resumed / "metrics.jsonl")
    assert [r["step"] for r in rows_a] == [r["step"] for r in rows_b] == list(range(6))
    assert all(r["train/kl_to_magnet"] > 0 for r in rows_a[1:4])  # the KL is at work
    _assert_rows_close(rows_a, rows_b)


def test_a_folder_trained_with_a_non_finite_value_is_refused_with_a_way_on() -> None:
    """Older versions let `learning_rate=nan` train (NaN weights); its folder asked to be
    resumed with `learning_rate=nan`, which never equals itself. Now: a new run."""
    from spiral.train.config import TrainConfig

    new = TrainConfig().to_json()
    saved = {**new, "learning_rate": float("nan")}
    with pytest.raises(ConfigError, match=r"learning_rate=nan, a value Spiral now refuses"):
        check_resume_config(saved, new, same_run=True)
    check_resume_config(dict(new), new, same_run=True)  # the same finite config resumes


def test_a_refusal_names_every_changed_key_and_its_words_resume() -> None:
    """Two keys that must change together are given back together: the words the refusal
    asks for are enough to continue."""
    import re

    saved = parse_config(["recipe=embedded-kuhn", "move_floor=0", "move_floor_coef=0"]).to_json()
    with pytest.raises(ConfigError) as refused:
        check_resume_config(saved, parse_config(["recipe=embedded-kuhn"]).to_json(), True)
    words = re.search(r"pass (.+?) to continue", str(refused.value))
    assert words is not None and words.group(1).split() == ["move_floor=0.0", "move_floor_coef=0.0"]
    again = parse_config(["recipe=embedded-kuhn", *words.group(1).split()]).to_json()
    check_resume_config(saved, again, same_run=True)


def test_a_longer_run_says_how_its_spanning_schedules_move() -> None:
    from spiral.train.resume import stretched_schedules

    spans = ["entropy_coef=0.3->0.1", "kl_coef=0->0.6", "learning_rate=1e-3*0.3@30"]
    short = parse_config([*spans, "max_steps=3"])
    longer = parse_config([*spans, "max_steps=120"])
    notice = stretched_schedules(short.to_json(), longer, step=3)
    assert notice is not None and notice.startswith("3 -> 120 steps")
    # linear 0.3->0.1: the saved run's last value at step 3, the longer run's 0.3 - 0.2 * 3/119
    assert "entropy_coef 0.1 -> 0.295" in notice and "kl_coef 0.6 -> 0.0151" in notice
    assert "learning_rate" not in notice  # a step schedule keeps its steps
    assert stretched_schedules(longer.to_json(), longer, step=3) is None
    flat = parse_config([*spans, "max_steps=9", "entropy_coef=0.2"])
    assert stretched_schedules(short.to_json(), flat, step=3) is not None  # kl still spans
    plain = parse_config(["max_steps=9"])
    assert stretched_schedules(parse_config(["max_steps=3"]).to_json(), plain, 3) is None


def test_a_run_folder_as_load_checkpoint_path_starts_from_its_newest_checkpoint(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`load_checkpoint_path=RUN` (what `spiral eval checkpoint=RUN` takes) stands for the
    run's newest intact checkpoint, as does RUN/checkpoints; a path that is none of a
    checkpoint, a run folder and its checkpoints folder is one line naming what to pass,
    before anything is written (it was "incomplete ... use one listed in index.jsonl" of
    the folder above)."""
    from spiral.cli import main as cli_main

    source = tmp_path / "source"
    _train(_cfg(tiny_model, source, 2, "save_every=1"))
    newest = latest_checkpoint(source / "checkpoints")
    assert newest is not None and newest.name == "step_000002"
    for named in (source, source / "checkpoints"):
        lines: list[str] = []
        cfg = _cfg(tiny_model, tmp_path / f"from-{named.name}", 3, f"load_checkpoint_path={named}")
        train(cfg, build_setup(cfg), make_learner_factory(cfg), log=lines.append)
        assert f"resumed from {newest} at step 2" in lines
        steps = [r["step"] for r in read_jsonl(tmp_path / f"from-{named.name}" / "metrics.jsonl")]
        assert min(steps) == 2
    empty, fresh = tmp_path / "empty", tmp_path / "fresh"
    empty.mkdir()
    (fresh / "checkpoints").mkdir(parents=True)
    for named, says in (
        (empty, "is neither a checkpoint"),
        (tmp_path / "nowhere", "does not exist"),
        (fresh, "holds no complete checkpoint"),
    ):
        target = tmp_path / "target"
        argv = [f"load_checkpoint_path={named}", f"log_path={target}"]
        assert cli_main(["train", *tiny_args(tiny_model, target, 3)[:-1], *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and says in err and "RUN/checkpoints/step_N" in err
        assert not target.exists()
