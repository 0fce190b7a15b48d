"""Checkpoints that prove they are whole: a manifest of every file's size and SHA-256.

`write_manifest(folder)` lists every file under a checkpoint folder (written last, before
the COMPLETE marker); `verify_manifest(folder)` re-hashes them and returns what is wrong
(missing, truncated, changed), or [] when the folder is exactly what was written. A
folder without a manifest (written before manifests existed) is reported as unverifiable,
not damaged: `verify_manifest(..., required=False)` accepts it.

It sits with the engines (below agents and train) because both resume (train/) and the
checkpoint agents of eval/play (agents/) verify before they load. Hashing reads every
byte once: ~0.1 s for a LoRA checkpoint of the embedded model, about a minute for the
weights and optimizer state of a 4B model.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from spiral.errors import SpiralError

MANIFEST = "MANIFEST.json"
_SKIP = frozenset({MANIFEST, "COMPLETE"})
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


def verify_manifest(folder: Path, required: bool = True) -> list[str]:
    """What differs between `folder` and its manifest; [] when every file matches."""
    path = folder / MANIFEST
    if not path.is_file():
        return [f"no {MANIFEST} (written before checkpoints were hashed)"] if required else []
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
