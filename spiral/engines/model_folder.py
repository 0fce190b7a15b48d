"""Model folders that `spiral export` writes, and the checks that they are whole.

An export is written in a staging folder: `spiral_run.json` first, saying the folder is
sealed (so a staging folder left by a killed export is recognisably unfinished), then
the weights, tokenizer and model card; `model_folder_problems` checks them (config,
weights whose safetensors headers parse and whose sizes match them, a tokenizer, no
adapter); then `manifest.write_manifest` and the `COMPLETE` marker seal it, exactly as
a checkpoint is sealed, and the folder is renamed into place.

`refuse_unfinished_export` is what every loader runs on a local folder
(`loading.resolve_model_path`): a sealed export without its marker, with a file shorter
or longer than the manifest says, or with weights, configs or adapter files the export
did not write (another model's adapter dropped in beside it would be loaded in place of
the merged weights) is refused in one line. Only the files loaders read are compared,
by size, so the check costs a directory listing, not a read of the weights; exports
made before sealing (no `sealed` in `spiral_run.json`) and every other model folder
pass unchanged.

It sits with the engines because the loaders below agents and the export in train/
share it.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any

from spiral.checkpoints.manifest import COMPLETE, MANIFEST
from spiral.errors import SpiralError

RUN_FILE = "spiral_run.json"  # the same name as spiral.agents.model_agent.RUN_FILE
SEALED = "sealed"  # the key of RUN_FILE that says the folder ends with a COMPLETE marker
# Files that transformers or PEFT read from a model folder: one the export did not write
# changes what loads.
_LOADED = re.compile(
    r"^(adapter_.*|.*\.(safetensors|bin|pt|pth|gguf)|.*config\.json|tokenizer.*"
    r"|special_tokens_map\.json|added_tokens\.json|chat_template\..*|vocab\..*|merges\.txt)$"
)


class IncompleteModelFolder(SpiralError, ValueError):
    """A model folder that is not what was written: half-written, damaged or mixed."""


def safetensors_problem(path: Path) -> str | None:
    """Why `path` is not a whole safetensors file (None when its header parses and the
    file ends where the header's last tensor does)."""
    try:
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            size = path.stat().st_size
            if length > size - 8:
                return f"{path.name} is cut short (its header says {length} bytes)"
            header = json.loads(handle.read(length))
    except (OSError, struct.error, ValueError) as err:
        return f"{path.name} has no readable safetensors header ({err})"
    if not isinstance(header, dict):
        return f"{path.name} has no readable safetensors header"
    offsets = [v.get("data_offsets", [0, 0]) for k, v in header.items() if k != "__metadata__"]
    end = max((int(o[1]) for o in offsets if isinstance(o, list) and len(o) == 2), default=0)
    if size != 8 + length + end:
        return f"{path.name} has {size} bytes, its header describes {8 + length + end}"
    return None


def _weight_files(folder: Path) -> tuple[list[Path], list[str]]:
    """The safetensors files the folder's model loads from, and what is missing."""
    index = folder / "model.safetensors.index.json"
    if (folder / "model.safetensors").is_file():
        return [folder / "model.safetensors"], []
    if not index.is_file():
        return [], ["no model.safetensors (nor a sharded index)"]
    try:
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        return [], [f"unreadable {index.name} ({err})"]
    missing = [f"{name} is missing" for name in shards if not (folder / name).is_file()]
    return [folder / name for name in shards if (folder / name).is_file()], missing


def model_folder_problems(folder: Path) -> list[str]:
    """What keeps `folder` from being a whole merged model folder; [] when it is one."""
    problems: list[str] = []
    try:
        if not isinstance(json.loads((folder / "config.json").read_text(encoding="utf-8")), dict):
            problems.append("config.json is not an object")
    except (OSError, ValueError) as err:
        problems.append(f"no readable config.json ({err})")
    weights, missing = _weight_files(folder)
    problems += missing
    problems += [p for p in map(safetensors_problem, weights) if p]
    if not any((folder / n).is_file() for n in ("tokenizer.json", "tokenizer_config.json")):
        problems.append("no tokenizer")
    if (folder / "adapter_config.json").exists():
        problems.append("an adapter_config.json (an export is merged, not an adapter)")
    return problems


def _run_file(folder: Path) -> dict[str, Any]:
    try:
        found = json.loads((folder / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _sealed_problems(folder: Path) -> list[str]:
    """What differs between a sealed export and its manifest, by name and size."""
    if not (folder / COMPLETE).is_file():
        return [f"no {COMPLETE} marker: it is half-written (an export that was stopped)"]
    try:
        entries = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        sizes = {name: int(entry["bytes"]) for name, entry in entries.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        return [f"unreadable {MANIFEST} ({err})"]
    problems = []
    for name, size in sorted(sizes.items()):
        file = folder / name
        if not _LOADED.match(file.name):
            continue  # a model card edited by hand changes nothing that loads
        if not file.is_file():
            problems.append(f"{name} is missing")
        elif file.stat().st_size != size:
            problems.append(f"{name} has {file.stat().st_size} bytes, not {size}")
    strays = sorted(
        p.name
        for p in folder.iterdir()
        if p.is_file() and p.name not in sizes and _LOADED.match(p.name)
    )
    if strays:
        problems.append(f"files the export did not write: {', '.join(strays)}")
    return problems


def refuse_unfinished_export(folder: Path) -> None:
    """Refuse, in one line, a sealed export folder that is not exactly what was written."""
    if not _run_file(folder).get(SEALED):
        return
    problems = _sealed_problems(folder)
    if problems:
        raise IncompleteModelFolder(
            f"exported model folder {folder} is not what spiral export wrote "
            f"({'; '.join(problems)}); export it again"
        )
