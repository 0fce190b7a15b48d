"""A checkpoint the disk will not take (full, over quota, read-only, no permission) stops
the run in one line saying which step the same command resumes from; the step's metrics
stay written, the previous checkpoint stays intact, and nothing half-written is left for
resume to take as good. Other failures keep their traceback."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from safetensors import SafetensorError

import spiral.train.checkpoint as checkpoint
from spiral.checkpoints.manifest import verify_manifest
from spiral.cli import main as cli_main
from spiral.errors import REFUSED, refused_write
from spiral.report.sinks import read_jsonl
from spiral.train.checkpoint import (
    CheckpointWriteError,
    LoopState,
    complete_checkpoints,
    save_checkpoint,
)

from .test_e2e import _assert_rows_close, tiny_args, tiny_model  # noqa: F401  (fixture)
from .test_stop_and_resume import _cfg


def _rust(code: int) -> Exception:
    """How safetensors and tokenizers report an OS error from their Rust writers."""
    return SafetensorError(
        f"Error while serializing: I/O error: {os.strerror(code)} (os error {code})"
    )


ERRORS: dict[str, Callable[[], BaseException]] = {
    "full disk": lambda: OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
    "full disk (safetensors)": lambda: _rust(errno.ENOSPC),
    "full disk (tokenizers)": lambda: Exception(f"{os.strerror(errno.ENOSPC)} (os error 28)"),
    "over quota": lambda: OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)),
    "read-only": lambda: OSError(errno.EROFS, os.strerror(errno.EROFS)),
    "no permission": lambda: PermissionError(errno.EACCES, os.strerror(errno.EACCES)),
}


def _learner_files(path: Path) -> None:
    """What a learner's save writes, small: weights, then optimizer state."""
    path.mkdir(parents=True)
    (path / "adapter_model.safetensors").write_bytes(b"w" * 4096)
    (path / "optimizer.safetensors").write_bytes(b"o" * 4096)


def _state(step: int) -> LoopState:
    return LoopState(step, {"seat": [0.1]}, {"model_name": "tiny"}, {})


def _fail_learner(err: BaseException) -> Callable[[Path], None]:
    def save(path: Path) -> None:  # the weights written, the optimizer state half-way
        _learner_files(path)
        (path / "optimizer.safetensors").write_bytes(b"o" * 100)
        raise err

    return save


def _fail_when(
    monkeypatch: pytest.MonkeyPatch, name: str, hit: Callable[..., bool]
) -> dict[str, BaseException]:
    """Make `checkpoint.<name>` raise the error given later when `hit(*args)`."""
    real = getattr(checkpoint.os if name == "replace" else checkpoint, name)
    box: dict[str, BaseException] = {}

    def patched(*args: Any, **kwargs: Any) -> Any:
        if hit(*args):
            raise box["err"]
        return real(*args, **kwargs)

    monkeypatch.setattr(checkpoint.os if name == "replace" else checkpoint, name, patched)
    return box


STAGES = ("learner files", "loop state", "manifest", "rename into place", "index")


def _arm(stage: str, monkeypatch: pytest.MonkeyPatch, err: BaseException) -> Callable[[Path], None]:
    """The save_learner of the failing save, with the failure placed at `stage`."""
    if stage == "learner files":
        return _fail_learner(err)
    hits = {
        "loop state": ("_write_json_atomic", lambda p, *_: p.name == "loop_state.json"),
        "manifest": ("write_manifest", lambda *_: True),
        "rename into place": ("replace", lambda src, *_: Path(src).name.startswith(".tmp-step_")),
        "index": ("_write_json_atomic", lambda p, *_: p.name == checkpoint.INDEX),
    }
    name, hit = hits[stage]
    _fail_when(monkeypatch, name, hit)["err"] = err
    return _learner_files


@pytest.mark.parametrize("kind", sorted(ERRORS))
@pytest.mark.parametrize("stage", STAGES)
def test_a_refused_write_keeps_the_last_checkpoint_and_leaves_nothing_half_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage: str, kind: str
) -> None:
    ckpt_dir = tmp_path / "checkpoints"
    save_checkpoint(ckpt_dir, _state(1), _learner_files)
    with pytest.raises(CheckpointWriteError) as refused:
        save_checkpoint(ckpt_dir, _state(2), _arm(stage, monkeypatch, ERRORS[kind]()))
    said = str(refused.value)
    assert "\n" not in said and f"checkpoint of step 2 in {ckpt_dir}" in said
    code = refused_write(ERRORS[kind]())
    assert code is not None and os.strerror(code) in said
    fix = "free space" if code in checkpoint.NO_SPACE else "make the folder writable"
    assert fix in said and "run the same command again" in said
    assert not [p.name for p in ckpt_dir.iterdir() if p.name.startswith(".")]
    assert verify_manifest(ckpt_dir / "step_000001") == []
    # Only a sealed checkpoint is ever in place: the newest is the one the message names.
    newest = complete_checkpoints(ckpt_dir)[0]
    assert verify_manifest(newest) == []
    resumes = 2 if stage == "index" else 1  # the index row is written after the rename
    assert newest.name == f"step_{resumes:06d}" and f"resumes from step {resumes}" in said


def test_a_lost_future_stays_in_place_when_its_replacement_cannot_be_renamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """step_000002 written by a run later resumed from step 1: renamed aside for the new
    one, and back when the new one cannot go in."""
    ckpt_dir = tmp_path / "checkpoints"
    save_checkpoint(ckpt_dir, _state(1), _learner_files)
    save_checkpoint(ckpt_dir, _state(2), _learner_files)
    before = (ckpt_dir / "step_000002" / "MANIFEST.json").read_text()
    err = OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(CheckpointWriteError, match="resumes from step 2"):
        save_checkpoint(ckpt_dir, _state(2), _arm("rename into place", monkeypatch, err))
    assert (ckpt_dir / "step_000002" / "MANIFEST.json").read_text() == before
    assert verify_manifest(ckpt_dir / "step_000002") == []
    assert not [p.name for p in ckpt_dir.iterdir() if p.name.startswith(".")]


def test_any_other_failure_keeps_its_traceback_and_leaves_nothing(tmp_path: Path) -> None:
    ckpt_dir = tmp_path / "checkpoints"
    with pytest.raises(ValueError, match="a bug"):
        save_checkpoint(ckpt_dir, _state(1), _fail_learner(ValueError("a bug")))
    with pytest.raises(OSError) as other:  # not the disk refusing: a bug, as it was
        save_checkpoint(ckpt_dir, _state(1), _fail_learner(OSError(errno.EBADF, "bad fd")))
    assert not isinstance(other.value, CheckpointWriteError)
    assert list(ckpt_dir.iterdir()) == []


@given(
    code=st.sampled_from(sorted(errno.errorcode)),
    form=st.sampled_from(["oserror", "rust", "cause", "context"]),
)
def test_refused_write_finds_the_errno_however_it_is_wrapped(code: int, form: str) -> None:
    base: BaseException = OSError(code, os.strerror(code)) if form != "rust" else _rust(code)
    if form in ("cause", "context"):
        outer = RuntimeError("saving failed")
        setattr(outer, f"__{form}__", base)
        base = outer
    assert refused_write(base) == (code if code in REFUSED else None)


# ---- the whole command ----------------------------------------------------------------


@pytest.fixture
def full_disk_at_second_save(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The disk fills while the second checkpoint's optimizer state is written: half the
    file lands, then safetensors' own error (as on a real full disk)."""
    import spiral.engines.torch.checkpoint_io as checkpoint_io

    real, calls = checkpoint_io.save_file, [0]

    def save_file(tensors: Any, filename: str, *args: Any, **kwargs: Any) -> None:
        calls[0] += 1
        if calls[0] == 2:
            Path(filename).write_bytes(b"\0" * 64)
            raise _rust(errno.ENOSPC)
        real(tensors, filename, *args, **kwargs)

    monkeypatch.setattr(checkpoint_io, "save_file", save_file)
    yield


def _args(model: Path, run: Path) -> list[str]:
    """A 3-step run with a checkpoint after every step, no evaluation."""
    keep = [a for a in tiny_args(model, run, 3, envs="KuhnPokerSingle-v0") if "_every=" not in a]
    return [*keep, "save_every=1", "eval_every=0"]


def test_a_full_disk_at_a_checkpoint_is_one_line_and_the_rerun_resumes_exactly(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    full_disk_at_second_save: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    straight, full = tmp_path / "straight", tmp_path / "full"
    capsys.readouterr()
    assert cli_main(["train", *_args(tiny_model, full)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "could not write the checkpoint of step 2" in err and "No space left" in err
    assert "free space" in err and "it resumes from step 1" in err
    assert max(r["step"] for r in read_jsonl(full / "metrics.jsonl")) == 1  # kept
    ckpt_dir = full / "checkpoints"
    assert [p.name for p in complete_checkpoints(ckpt_dir)] == ["step_000001"]
    assert verify_manifest(ckpt_dir / "step_000001") == []
    assert not [p.name for p in ckpt_dir.iterdir() if p.name.startswith(".")]
    monkeypatch.undo()  # space freed
    assert cli_main(["train", *_args(tiny_model, full)]) == 0
    assert cli_main(["train", *_args(tiny_model, straight)]) == 0
    _assert_rows_close(read_jsonl(straight / "metrics.jsonl"), read_jsonl(full / "metrics.jsonl"))
    index = [json.loads(line) for line in (ckpt_dir / "index.jsonl").read_text().splitlines()]
    assert [row["step"] for row in index] == [1, 2, 3]


def _writes_into_read_only_folders(tmp: Path) -> bool:
    """Whether this process ignores folder permissions (root, CAP_DAC_OVERRIDE)."""
    folder = tmp / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        (folder / "probe").touch()
    except PermissionError:
        return False
    finally:
        folder.chmod(0o755)
    return True


def test_a_checkpoints_folder_made_read_only_mid_run_is_one_line(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from spiral.train.loop import train
    from spiral.train.setup import build_setup, make_learner_factory

    if _writes_into_read_only_folders(tmp_path):
        pytest.skip("this user writes into read-only folders (root)")
    run = tmp_path / "run"
    cfg = _cfg(tiny_model, run, 3, "save_every=1")
    build = make_learner_factory(cfg)

    def factory() -> Any:  # the folder turns read-only during step 1
        learner = build()
        real, calls = learner.optim_step, [0]

        def optim_step(lr: float) -> dict[str, float]:
            calls[0] += 1
            if calls[0] == 2:
                (run / "checkpoints").chmod(0o555)
            return real(lr)

        learner.optim_step = optim_step  # type: ignore[method-assign]
        return learner

    try:
        with pytest.raises(CheckpointWriteError) as refused:
            train(cfg, build_setup(cfg), factory, log=lambda _: None)
    finally:
        (run / "checkpoints").chmod(0o755)
    said = str(refused.value)
    assert "checkpoint of step 2" in said and os.strerror(errno.EACCES) in said
    assert "make the folder writable" in said and "resumes from step 1" in said
    assert [p.name for p in complete_checkpoints(run / "checkpoints")] == ["step_000001"]
    assert max(r["step"] for r in read_jsonl(run / "metrics.jsonl")) == 1


def test_a_full_disk_under_the_metrics_is_one_line_kept_in_the_console_log(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The disk fills as step 2's metrics row is written (half of it lands): one line
    naming metrics.jsonl and the step the rerun resumes from, the same line at the end of
    console.log, and the rerun, once there is space, ends where a straight run ends."""
    from spiral.report.sinks import JsonlSink

    real, rows = JsonlSink.log, [0]

    def log(self: JsonlSink, metrics: Any, step: int) -> None:
        rows[0] += 1
        if rows[0] == 2:
            with self.path.open("ab") as handle:
                handle.write(b'{"step": 2, "ti')
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
        real(self, metrics, step)

    monkeypatch.setattr(JsonlSink, "log", log)
    straight, full = tmp_path / "straight", tmp_path / "full"
    capsys.readouterr()
    assert cli_main(["train", *_args(tiny_model, full)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"could not write {full / 'metrics.jsonl'}: No space left" in err
    assert "free space" in err and "it resumes from step 1" in err
    last = (full / "console.log").read_text().strip().splitlines()[-1]
    assert last.startswith("error: could not write") and "resumes from step 1" in last
    monkeypatch.undo()  # space freed
    assert cli_main(["train", *_args(tiny_model, full)]) == 0
    assert cli_main(["train", *_args(tiny_model, straight)]) == 0
    _assert_rows_close(read_jsonl(straight / "metrics.jsonl"), read_jsonl(full / "metrics.jsonl"))


def test_a_console_log_the_disk_refuses_stops_and_the_terminal_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import sys

    from spiral.report import console_log

    class FullFile(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "open", lambda self, *a, **k: FullFile())
    with console_log.kept_in(tmp_path / "console.log"):
        print("step 1 done")
        print("step 2 done", file=sys.stderr)
    captured = capsys.readouterr()
    assert captured.out == "step 1 done\n" and captured.err == "step 2 done\n"
