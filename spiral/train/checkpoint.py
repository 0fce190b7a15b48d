"""Training checkpoints: atomic folders, an index, and resume.

Layout of a run folder:

    config.json            every config value of the run
    metrics.jsonl          one row per step (the source of truth)
    transcripts/           readable games, a few per step
    checkpoints/index.jsonl        one row per complete checkpoint: {"step", "path", "time"}
    checkpoints/step_000010/       learner/ (HF/PEFT model folder + optimizer state),
                                   loop_state.json, COMPLETE

A checkpoint is written into a hidden temporary folder, given a `MANIFEST.json` (each
file's size and SHA-256) and a COMPLETE marker that seals the manifest's own hash
(`spiral/checkpoints/manifest.py`: a deleted or rewritten manifest is damage), and renamed
into place only when everything is on disk, so a crash never leaves a folder that resume
would pick. `index.jsonl` lists complete checkpoints by names that cannot leave
`checkpoints/` (a row that does, a hand edit, is skipped). Pool members are hashed and
sealed the same way when they join (`pool_files.check_member` on resume). A disk that
refuses the write (full, over quota, read-only, no permission: `refused_write`, which
also reads the errno out of the errors safetensors and tokenizers raise from Rust) is a
`CheckpointWriteError`: the half-written folder is removed, the checkpoints before it
stay as they were, and the message says which step the same command resumes from. `loop_state.json` holds the next step, the RAE baselines and the
config. No RNG state is needed: every seed (games, sampling) is derived from
(`seed`, step), so a resumed run continues exactly as an uninterrupted one.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spiral.agents.model_agent import list_checkpoints
from spiral.checkpoints.manifest import (
    DamagedCheckpointError,
    in_checkpoints,
    seal,
    verify_or_say,
    write_manifest,
)
from spiral.errors import NO_SPACE, SpiralError, refused_write
from spiral.train.model_card import write_model_cards

COMPLETE = "COMPLETE"
INDEX = "index.jsonl"


class CheckpointError(SpiralError, RuntimeError):
    """A checkpoint that cannot be used, with a message saying what to do."""


class CheckpointWriteError(CheckpointError):
    """A checkpoint the file system would not take (full, read-only, no permission)."""


@dataclass(frozen=True)
class LoopState:
    step: int  # the next step to run
    baselines: dict[str, Any]
    config: dict[str, Any]
    extra: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "baselines": self.baselines,
            "config": self.config,
            "extra": self.extra,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LoopState:
        return cls(
            int(data["step"]),
            data.get("baselines", {}),
            data.get("config", {}),
            data.get("extra", {}),
        )


def checkpoint_name(step: int) -> str:
    return f"step_{step:06d}"


def _write_json_atomic(path: Path, data: Any) -> None:
    """Write, then rename over `path`. The temporary name starts with `.tmp-`, so what a
    killed write leaves is removed at the next start (`resume.remove_partial_writes`)."""
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(data if isinstance(data, str) else json.dumps(data, indent=2))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_index(ckpt_dir: Path) -> list[dict[str, Any]]:
    """Rows of the index whose folders are this run's complete checkpoints; a torn or
    corrupt row, or one whose path leaves the run's checkpoints folder (a hand edit), is
    skipped."""
    path = ckpt_dir / INDEX
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(row, dict) or not in_checkpoints(ckpt_dir, row.get("path")):
            continue
        if is_complete(ckpt_dir / str(row["path"])) and isinstance(row.get("step"), int):
            rows.append(row)
    return rows


def is_complete(folder: Path) -> bool:
    return (
        folder.is_dir() and (folder / COMPLETE).exists() and (folder / "loop_state.json").exists()
    )


def save_checkpoint(
    ckpt_dir: Path, state: LoopState, save_learner: Callable[[Path], None], final: bool = False
) -> Path:
    """Write a checkpoint atomically and add it to the index; returns its folder. Where
    the file system refuses a write (`refused_write`), nothing half-written is left and
    the error says what to do; any other failure is a bug and keeps its traceback."""
    try:
        return _save(ckpt_dir, state, save_learner, final)
    except Exception as err:
        code = refused_write(err)
        if code is None:
            raise
        raise CheckpointWriteError(_write_refused(ckpt_dir, state.step, code)) from err


class RunWriteError(SpiralError, OSError):
    """A run file (metrics, transcripts, the pool) the file system refused to write."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def run_write_refused(err: BaseException, run_dir: Path) -> RunWriteError | None:
    """The one-line error for a write in the run the file system refused (`REFUSED`):
    which file, why, what to do and the step the rerun resumes from; None for any other
    error."""
    code = refused_write(err)
    if code is None or isinstance(err, SpiralError):
        return None
    what = getattr(err, "filename", None) or f"a file in {run_dir}"
    fix = "free space on that disk" if code in NO_SPACE else "make the folder writable"
    kept = list_checkpoints(run_dir)
    resumes = f"it resumes from step {kept[-1][0]}" if kept else "it starts again at step 0"
    return RunWriteError(
        f"could not write {what}: {os.strerror(code)}; {fix} and run the same command "
        f"again: {resumes}"
    )


def _write_refused(ckpt_dir: Path, step: int, code: int) -> str:
    """The one line: which checkpoint, why, what to do and where the rerun starts."""
    fix = "free space on that disk" if code in NO_SPACE else "make the folder writable"
    kept = list_checkpoints(ckpt_dir.parent)
    resumes = f"it resumes from step {kept[-1][0]}" if kept else "it starts again at step 0"
    return (
        f"could not write the checkpoint of step {step} in {ckpt_dir}: {os.strerror(code)}; "
        f"{fix} and run the same command again: {resumes}"
    )


def _save(
    ckpt_dir: Path, state: LoopState, save_learner: Callable[[Path], None], final: bool
) -> Path:
    """`save_checkpoint`'s writes: a hidden folder, renamed into place once sealed, then
    the index row."""
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    name = checkpoint_name(state.step)
    tmp = ckpt_dir / f".tmp-{name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        tmp.mkdir()
        save_learner(tmp / "learner")
        write_model_cards(tmp / "learner", state.config, state.step)
        _write_json_atomic(tmp / "loop_state.json", state.to_json())
        write_manifest(tmp)  # every file's size and hash, checked before resume trusts it
        (tmp / COMPLETE).write_text(seal(tmp), encoding="utf-8")  # names the manifest's hash
        target = _put_in_place(tmp, ckpt_dir / name)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # the space back, and no half checkpoint
        raise
    rows = [r for r in read_index(ckpt_dir) if int(r["step"]) < state.step]
    rows.append({"step": state.step, "path": name, "time": time.time(), "final": final})
    _write_json_atomic(ckpt_dir / INDEX, "".join(json.dumps(r) + "\n" for r in rows))
    return target


def _put_in_place(tmp: Path, target: Path) -> Path:
    """Rename the sealed `tmp` to `target`. A `target` already there was written by a run
    that was then resumed from an earlier step: a lost future. It is replaced (renamed
    aside first, and back if the rename fails, so one complete folder is always there;
    removed once the new one is in place): no .superseded copies pile up."""
    old = None
    if target.exists():
        old = target.with_name(f".tmp-old-{target.name}-{os.getpid()}")
        target.rename(old)
    try:
        os.replace(tmp, target)
    except BaseException:
        if old is not None:
            old.rename(target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return target


def load_loop_state(folder: Path) -> LoopState:
    """Read a checkpoint's loop state; a clear error if the folder is not a checkpoint."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {folder} does not exist")
    if not (folder / COMPLETE).exists():
        raise CheckpointError(
            f"checkpoint {folder} is incomplete (no {COMPLETE} marker): it was being written when "
            f"the run stopped. Use an earlier one listed in {folder.parent / INDEX}."
        )
    try:
        data = json.loads((folder / "loop_state.json").read_text(encoding="utf-8"))
        state = LoopState.from_json(data)
    except (OSError, json.JSONDecodeError, KeyError, ValueError, TypeError) as err:
        raise CheckpointError(f"checkpoint {folder} has a corrupt loop_state.json ({err})") from err
    named = folder.name[len("step_") :] if folder.name.startswith("step_") else ""
    if state.step < 0 or (named.isdigit() and int(named) != state.step):
        raise CheckpointError(
            f"checkpoint {folder} has a corrupt loop_state.json (step {state.step} does not "
            "match the folder); use an earlier checkpoint"
        )
    return state


def verified_loop_state(folder: Path) -> LoopState:
    """`load_loop_state` after checking every file against the checkpoint's manifest;
    DamagedCheckpointError says what is wrong. Checkpoints written before manifests
    existed are accepted unverified."""
    problems = verify_or_say(folder)
    if problems:
        raise DamagedCheckpointError(f"checkpoint {folder} is damaged: {'; '.join(problems)}")
    try:
        return load_loop_state(folder)
    except CheckpointError as err:
        raise DamagedCheckpointError(str(err)) from err


def complete_checkpoints(ckpt_dir: Path) -> list[Path]:
    """Every complete checkpoint folder (index rows and a folder scan), newest first."""
    return [folder for _, folder in reversed(list_checkpoints(ckpt_dir.parent))]


def latest_checkpoint(ckpt_dir: Path) -> Path | None:
    """The newest complete checkpoint by the index, else by scanning the folders."""
    rows = read_index(ckpt_dir)
    if rows:
        return ckpt_dir / str(max(rows, key=lambda r: int(r["step"]))["path"])
    found = sorted(
        p for p in ckpt_dir.glob("step_[0-9]*") if is_complete(p) and p.name[5:].isdigit()
    )
    return found[-1] if found else None
