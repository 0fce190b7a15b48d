"""Checkpoints that prove they are whole: a manifest of every file's size and SHA-256.

`write_manifest(folder)` lists every file under a checkpoint folder (written last, before
the COMPLETE marker); `verify_manifest(folder)` re-hashes them and returns what is wrong
(missing, truncated, changed), or [] when the folder is exactly what was written.

The COMPLETE marker seals the manifest: `seal(folder)` is its text, the time and the
manifest's own SHA-256. So a checkpoint whose manifest was deleted or edited is damaged
(its marker names a manifest that is not there, or another one), and only a checkpoint
whose marker names no manifest (written before manifests existed) is unverifiable
rather than damaged: `verify_manifest(..., required=False)` accepts it, and
`predates_manifests` says so for the caller to tell the user.

Damage a manifest cannot see (a checkpoint hashed and sealed again after it was damaged,
a model folder that has no manifest) shows when a file is read: `damaged_if_unreadable`
turns the readers' errors into one line naming the file and what to do, for resume and,
with their own advice, for the model loaders of every command.

It sits with the engines (below agents and train) because both resume (train/) and the
checkpoint agents of eval/play (agents/) verify before they load. Hashing reads every
byte once: ~0.1 s for a LoRA checkpoint of the embedded model, about a minute for the
weights and optimizer state of a 4B model.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from spiral.errors import SpiralError

MANIFEST = "MANIFEST.json"
COMPLETE = "COMPLETE"
_SKIP = frozenset({MANIFEST, COMPLETE})
_SEAL = "manifest-sha256 "
_CHUNK = 1 << 20


class DamagedCheckpointError(SpiralError, RuntimeError):
    """A checkpoint whose files are not what was written (or whose contents are unusable)."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in _SKIP)


def write_manifest(folder: Path) -> dict[str, dict[str, object]]:
    """Hash every file under `folder` into `folder/MANIFEST.json`; returns the entries."""
    entries: dict[str, dict[str, object]] = {
        p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
        for p in _files(folder)
    }
    (folder / MANIFEST).write_text(json.dumps(entries, indent=1, sort_keys=True), encoding="utf-8")
    return entries


def in_checkpoints(ckpt_dir: Path, name: object) -> bool:
    """Whether an index row's path names one of this run's checkpoint folders: a
    `step_N` folder directly inside `ckpt_dir`, never a path (or link) that leaves it."""
    if not isinstance(name, str) or not name.startswith("step_"):
        return False
    return (ckpt_dir / name).resolve().parent == ckpt_dir.resolve()


def seal(folder: Path) -> str:
    """The COMPLETE marker's text for `folder`, whose manifest is written: the time and
    the manifest's hash."""
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S')}\n{_SEAL}{_sha256(folder / MANIFEST)}\n"


def _sealed_hash(folder: Path) -> str | None:
    """The manifest hash the COMPLETE marker names, or None (no marker, or one written
    before markers sealed a manifest)."""
    try:
        text = (folder / COMPLETE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(_SEAL):
            return line[len(_SEAL) :].strip()
    return None


def predates_manifests(folder: Path) -> bool:
    """Whether `folder` was written before checkpoints carried a manifest (nothing to
    verify it against)."""
    return not (folder / MANIFEST).is_file() and _sealed_hash(folder) is None


def verify_or_say(folder: Path) -> list[str]:
    """`verify_manifest(folder, required=False)`, and one line on stderr where the folder
    predates manifests and is used unverified."""
    problems = verify_manifest(folder, required=False)
    if not problems and predates_manifests(folder):
        print(
            f"checkpoint {folder} predates manifests: its files cannot be verified; used as is",
            file=sys.stderr,
        )
    return problems


def verify_manifest(folder: Path, required: bool = True) -> list[str]:
    """What differs between `folder` and its manifest; [] when every file matches."""
    path = folder / MANIFEST
    sealed = _sealed_hash(folder)
    if not path.is_file():
        if sealed is not None:
            return [f"{MANIFEST} is missing (the checkpoint was written with one)"]
        return [f"no {MANIFEST} (written before checkpoints were hashed)"] if required else []
    if sealed is not None and _sha256(path) != sealed:
        return [f"{MANIFEST} is not the one the checkpoint was written with"]
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(entries, dict):
            raise ValueError("not an object")
    except (OSError, ValueError) as err:
        return [f"unreadable {MANIFEST} ({err})"]
    problems: list[str] = []
    for name, entry in sorted(entries.items()):
        file = folder / name
        if not file.is_file():
            problems.append(f"{name} is missing")
        elif not isinstance(entry, dict) or file.stat().st_size != entry.get("bytes"):
            problems.append(f"{name} has {file.stat().st_size} bytes, not {entry.get('bytes')}")
        elif _sha256(file) != entry.get("sha256"):
            problems.append(f"{name} does not match its hash (changed or corrupted)")
    return problems


RESUME_FIX = "resume from an earlier checkpoint"
_READ_ERRORS: tuple[type[BaseException], ...] = (OSError, json.JSONDecodeError, KeyError)


@contextlib.contextmanager
def damaged_if_unreadable(
    path: Path,
    fix: str = RESUME_FIX,
    error: type[Exception] = DamagedCheckpointError,
    also: tuple[type[BaseException], ...] = _READ_ERRORS,
) -> Iterator[None]:
    """Unreadable files (truncated, flipped bytes, a rewritten header, bad JSON) -> one
    line naming the file and `fix`, as `error`. safetensors errors are always caught;
    `also` adds the errors a checkpoint's own readers raise (a model loader passes none:
    there an OSError means a missing model, said elsewhere)."""
    from safetensors import SafetensorError

    caught: tuple[type[BaseException], ...] = (SafetensorError, *also)
    try:
        yield
    except caught as err:
        file = unreadable_file(path)
        where = f"{file} is unreadable" if file else f"a file in {path} is unreadable"
        raise error(f"{where} ({type(err).__name__}: {err}); {fix}") from err


def unreadable_file(path: Path) -> Path | None:
    """The file to name to the user (the readers' errors do not say which): `path`
    itself, or for a folder its first safetensors file whose header does not open,
    weights before optimizer state; None where every one opens."""
    from safetensors import SafetensorError, safe_open

    if not path.is_dir():
        return path
    files = sorted(
        path.glob("*.safetensors"), key=lambda p: (p.name.startswith("optimizer"), p.name)
    )
    for file in files:
        try:
            with safe_open(str(file), framework="pt"):
                pass
        except (SafetensorError, OSError):
            return file
    return None
