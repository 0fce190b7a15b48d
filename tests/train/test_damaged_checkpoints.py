"""Checkpoints that prove they are whole: every kind of damage to the newest checkpoint
is detected, reported, and resume falls back to the newest intact one, ending exactly
where an uninterrupted run ends. A damaged checkpoint named by the user stops the run."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from spiral.checkpoints.manifest import (
    DamagedCheckpointError,
    seal,
    verify_manifest,
    write_manifest,
)
from spiral.report.sinks import DamagedMetricsError, read_jsonl
from spiral.train.checkpoint import latest_checkpoint, load_loop_state

from .test_e2e import _assert_rows_close, tiny_model  # noqa: F401  (fixture)
from .test_stop_and_resume import _cfg, _train

ADAPTER = "learner/adapter_model.safetensors"


def _truncate(folder: Path) -> None:
    path = folder / ADAPTER
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip(folder: Path) -> None:
    path = folder / ADAPTER
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF  # inside the tensor data: the file still parses
    path.write_bytes(bytes(data))


def _rehash(folder: Path) -> None:
    """Hash the folder again and seal it: damage the manifest cannot see."""
    write_manifest(folder)
    (folder / "COMPLETE").write_text(seal(folder))


def _manifest_deleted(folder: Path) -> None:
    _flip(folder)
    (folder / "MANIFEST.json").unlink()


def _manifest_rewritten(folder: Path) -> None:
    _flip(folder)
    write_manifest(folder)  # the manifest now matches the damage, but not the seal


def _nan_weights_hashed(folder: Path) -> None:
    """A diverged update saved faithfully: the manifest matches, the contents do not."""
    path = folder / ADAPTER
    tensors = load_file(str(path))
    name = next(iter(tensors))
    tensors[name] = torch.full_like(tensors[name], float("nan"))
    save_file(tensors, str(path))
    _rehash(folder)


def _no_optimizer(folder: Path) -> None:
    (folder / "learner" / "optimizer.json").unlink()
    _rehash(folder)


def _negative_step(folder: Path) -> None:
    path = folder / "loop_state.json"
    state = json.loads(path.read_text())
    state["step"] = -3
    path.write_text(json.dumps(state))
    _rehash(folder)


def _bad_optimizer_json(folder: Path) -> None:
    (folder / "learner" / "optimizer.json").write_text("{not json")
    _rehash(folder)


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated adapter": _truncate,
    "flipped bytes": _flip,
    "flipped bytes, manifest deleted": _manifest_deleted,
    "flipped bytes, manifest rewritten": _manifest_rewritten,
    "no COMPLETE marker": lambda f: (f / "COMPLETE").unlink(),
    "NaN weights": _nan_weights_hashed,
    "missing optimizer state": _no_optimizer,
    "unreadable optimizer state": _bad_optimizer_json,
    "negative step": _negative_step,
}


@pytest.fixture(scope="module")
def finished_runs(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    """An uninterrupted 5-step run and a 4-step run (checkpoints at 2 and 4) to damage."""
    root = tmp_path_factory.mktemp("damage")
    _train(_cfg(tiny_model, root / "straight", 5))
    _train(_cfg(tiny_model, root / "four", 4))
    return root


def _four(finished_runs: Path, tmp_path: Path) -> Path:
    """A copy of the 4-step run, to damage."""
    run = tmp_path / "run"
    shutil.copytree(finished_runs / "four", run)
    return run


def _like_straight(finished_runs: Path, run: Path) -> None:
    """The resumed run's metrics are the uninterrupted 5-step run's."""
    _assert_rows_close(
        read_jsonl(finished_runs / "straight" / "metrics.jsonl"), read_jsonl(run / "metrics.jsonl")
    )


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_damaged_newest_checkpoint_falls_back(
    finished_runs: Path,
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
    kind: str,
) -> None:
    run = _four(finished_runs, tmp_path)
    newest = latest_checkpoint(run / "checkpoints")
    assert newest is not None and newest.name == "step_000004"
    DAMAGE[kind](newest)
    logs: list[str] = []
    cfg = _cfg(tiny_model, run, 5)
    from spiral.train.loop import train
    from spiral.train.setup import build_setup, make_learner_factory

    train(cfg, build_setup(cfg), make_learner_factory(cfg), log=logs.append)
    said = "\n".join(logs)
    assert "resumed from" in said and "step_000002" in said, said
    if kind != "no COMPLETE marker":  # an incomplete folder is simply not a checkpoint
        assert "skipping damaged checkpoint" in said, said
    assert load_loop_state(latest_checkpoint(run / "checkpoints")).step == 5
    _like_straight(finished_runs, run)


def test_named_damaged_checkpoint_stops_with_the_reason(
    finished_runs: Path,
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    run = _four(finished_runs, tmp_path)
    named = run / "checkpoints" / "step_000004"
    _flip(named)
    assert verify_manifest(named) == [
        "learner/adapter_model.safetensors does not match its hash (changed or corrupted)"
    ]
    with pytest.raises(DamagedCheckpointError, match="does not match its hash"):
        _train(_cfg(tiny_model, tmp_path / "new", 5, f"load_checkpoint_path={named}"))


def test_a_complete_last_metrics_row_without_its_newline_is_kept_on_resume(
    finished_runs: Path,
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    run = _four(finished_runs, tmp_path)
    data = (run / "metrics.jsonl").read_bytes()
    (run / "metrics.jsonl").write_bytes(data.rstrip(b"\n"))  # killed before the newline
    _train(_cfg(tiny_model, run, 5))
    _like_straight(finished_runs, run)


def test_a_damaged_middle_metrics_row_stops_resume_in_one_line(
    finished_runs: Path,
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    run = _four(finished_runs, tmp_path)
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    lines[1] = lines[1][: len(lines[1]) // 2] + "\n"  # a damaged row in the middle
    (run / "metrics.jsonl").write_text("".join(lines))
    before = (run / "metrics.jsonl").read_bytes()
    with pytest.raises(DamagedMetricsError, match=r"metrics.jsonl:2: damaged metrics row"):
        _train(_cfg(tiny_model, run, 5))
    assert (run / "metrics.jsonl").read_bytes() == before  # nothing lost


def test_torn_metrics_line_is_dropped_on_resume(
    finished_runs: Path,
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    run = _four(finished_runs, tmp_path)
    with (run / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 4, "train/loss": 0.1')  # a kill during the write
    _train(_cfg(tiny_model, run, 5))
    _like_straight(finished_runs, run)


def test_an_index_row_pointing_outside_the_run_is_never_resumed_from(
    finished_runs: Path,
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A hand-edited index row naming another run's checkpoint (a path that leaves this
    run's checkpoints folder) is skipped: the run resumes from its own newest."""
    from spiral.agents.model_agent import list_checkpoints
    from spiral.train.loop import train
    from spiral.train.setup import build_setup, make_learner_factory

    run, foreign = _four(finished_runs, tmp_path), tmp_path / "foreign"
    shutil.copytree(finished_runs / "straight", foreign)
    with (run / "checkpoints" / "index.jsonl").open("a") as handle:
        outside = "step_000002/../../../foreign/checkpoints/step_000005"
        handle.write(json.dumps({"step": 99, "path": outside}) + "\n")
        handle.write(
            json.dumps({"step": 98, "path": str(foreign / "checkpoints" / "step_000005")}) + "\n"
        )
    assert [step for step, _ in list_checkpoints(run)] == [2, 4]
    logs: list[str] = []
    cfg = _cfg(tiny_model, run, 5)
    train(cfg, build_setup(cfg), make_learner_factory(cfg), log=logs.append)
    said = "\n".join(logs)
    assert "resumed from" in said and "step_000004" in said, said
    _like_straight(finished_runs, run)
