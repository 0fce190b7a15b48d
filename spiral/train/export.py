"""`spiral export checkpoint=PATH out=DIR`: a standalone merged model folder.

LoRA checkpoints are merged into their base model; the result loads with plain
`AutoModelForCausalLM.from_pretrained(out)` and any Hugging Face tool. `weights=averaged`
exports the run's averaged weights (`weight_ema_decay`) instead of the last iterate.

`out` is only ever a whole export: the folder is written in a hidden staging folder
beside it (same parent, so the last step is a rename on one file system; inside an
empty `out` that is a mount point or sits in a folder this user cannot write, then
moved up file by file, the completion marker last), checked
(`engines.model_folder.model_folder_problems`), sealed with a manifest and a `COMPLETE`
marker, then renamed into place; any failure removes the staging folder and leaves
`out` as it was. A non-empty `out` is refused: files left there (another export's
adapter, a user's config.json) would be loaded with, or instead of, the merged weights.
`replace=true` replaces it whole: the old folder is renamed aside, the new one renamed
in, the old one removed (put back if the second rename fails or is interrupted). The
hidden folders of an export that was killed are removed by the next export to `out`. An `out` that cannot become a folder is refused before any
model loads.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import chz

from spiral.args import help_text, parse_command, wants_help
from spiral.checkpoints.manifest import COMPLETE, seal, write_manifest
from spiral.engines.base import AVERAGED
from spiral.engines.model_folder import (
    RUN_FILE,
    SEALED,
    IncompleteModelFolder,
    model_folder_problems,
)
from spiral.errors import SpiralError, UsageError
from spiral.report.writable import check_writable_folder
from spiral.train.averaging import WeightAverage
from spiral.train.checkpoint import (
    CheckpointError,
    LoopState,
    latest_checkpoint,
    load_loop_state,
    refused_write,
    verified_loop_state,
)
from spiral.train.model_card import CARD, model_card


@chz.chz
class ExportArgs:
    """usage: spiral export checkpoint=PATH out=DIR [weights=live|averaged] [replace=true]

    A standalone merged model folder that loads with AutoModelForCausalLM.from_pretrained."""

    checkpoint: str = chz.field(doc="a checkpoint folder, or a run folder (its newest one)")
    out: str = chz.field(doc="the folder to write (new or empty, unless replace=true)")
    weights: Literal["live", "averaged"] = chz.field(
        default="live", doc="live (the last iterate) or averaged (weight_ema_decay's average)"
    )
    replace: bool = chz.field(
        default=False,
        doc="replace a non-empty out whole: the old folder is removed, never merged into",
    )

    def validate(self) -> ExportArgs:
        for key in ("checkpoint", "out"):
            if not getattr(self, key).strip():
                raise UsageError(f"{key}= is empty; give a folder (spiral export --help)")
        return self


# The file system's answers to a write, not bugs: the user frees space or picks a folder.
REFUSED = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})


class ExportWriteError(SpiralError, OSError):
    """Writing the export failed (a full disk, a read-only folder); `out` is unchanged."""


def resolve_checkpoint(path: Path) -> Path:
    """A checkpoint folder, or a run folder (its newest complete checkpoint)."""
    if (path / "checkpoints").is_dir():
        found = latest_checkpoint(path / "checkpoints")
        if found is None:
            raise CheckpointError(f"run folder {path} has no complete checkpoint yet")
        return found
    load_loop_state(path)  # validates: exists, complete, readable
    return path


def _entries(out: Path) -> list[str]:
    """The names in `out` ([] when it is not a folder)."""
    if not out.is_dir():
        return []
    try:
        return sorted(p.name for p in out.iterdir())
    except OSError as err:
        raise UsageError(f"out={out} cannot be read ({err.strerror}); choose another out") from err


def check_out(out: Path, replace: bool, keep: Sequence[Path]) -> None:
    """Refuse, before any model loads, an `out` the export cannot become: a link or a
    file, a non-empty folder without replace=true, a folder that holds what must stay
    (`keep`: the checkpoint, the working folder), a parent that cannot be written."""
    try:
        out.lstat()
    except (FileNotFoundError, NotADirectoryError):
        pass  # a new folder (or under a file: said below)
    except OSError as err:  # a name longer than the file system takes, a loop of links
        raise UsageError(f"out={out} cannot be used ({err.strerror}); choose another out") from None
    if out.is_symlink():
        raise UsageError(f"out={out} is a link; pass the folder it points to, or a new folder")
    if out.exists() and not out.is_dir():
        raise UsageError(f"out={out} is a file, not a folder; pass a new or empty folder")
    entries = _entries(out)
    if entries and not replace:
        # repr's escapes keep a name with a newline in it from breaking the one line.
        shown = ", ".join(repr(n)[1:-1] for n in entries[:3]) + (", ..." * (len(entries) > 3))
        raise UsageError(
            f"out={out} is not empty (it holds {shown}); export into a new or empty folder, "
            "or pass replace=true to replace it whole"
        )
    target = out.resolve()
    for precious in keep if entries else ():
        if target == precious.resolve() or target in precious.resolve().parents:
            raise UsageError(
                f"replace=true would delete {precious}, which is inside out={out}; "
                "choose another out"
            )
    if entries and _mount_point(out):
        raise UsageError(
            f"out={out} is a mount point holding files, which replace=true cannot swap "
            "whole; empty it first, or export into a new folder inside it"
        )
    # The staging folder is made beside `out` (its parent, or for a new `out` the nearest
    # folder that exists, must take new files), or inside an empty `out` that is a mount
    # point or whose parent is not writable (`_stages_inside`).
    if out.exists():
        check_writable_folder(out if _stages_inside(out) else out.parent)
    else:
        check_writable_folder(out, "out")


def refuse_sources(out: Path, ckpt: Path, config: dict[str, Any]) -> None:
    """Refuse an `out` that is, holds or lies inside what the export reads: the
    checkpoint or the run's base model folder; writing there would replace
    the weights being merged, and the run would later load a model it was not trained on."""
    target = out.resolve()
    sources = [("the checkpoint", ckpt.resolve())]
    base = str(config.get("model_name") or "")
    if base and Path(base).expanduser().is_dir():
        sources.append(("the run's base model", Path(base).expanduser().resolve()))
    for what, source in sources:
        if target == source or source in target.parents or target in source.parents:
            raise UsageError(
                f"out={out} is or holds {what} ({source}), which the export reads; "
                "choose a folder outside it"
            )


def _mount_point(out: Path) -> bool:
    """An existing folder on another file system than its parent's (a mounted volume)."""
    return out.is_dir() and os.stat(out).st_dev != os.stat(out.parent).st_dev


def _stages_inside(out: Path) -> bool:
    """Whether the export is written inside `out` (an empty folder that cannot be renamed
    onto: a mount point, or one in a folder this user cannot write) instead of beside it."""
    if not out.is_dir() or _entries(out):
        return False
    return _mount_point(out) or not os.access(out.parent, os.W_OK | os.X_OK)


def _make_parents(out: Path) -> list[Path]:
    """Create `out`'s missing parent folders; returns them, deepest first."""
    missing, parent = [], out.parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        _remove_empty(missing)
        raise UsageError(
            f"out={out}: cannot create {out.parent} ({err.strerror}); choose a folder you "
            "can write to"
        ) from err
    return missing


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:  # deepest first; one that is not empty stays, with its parents
        try:
            folder.rmdir()
        except OSError:
            return


@contextlib.contextmanager
def staged(out: Path, replace: bool) -> Iterator[Path]:
    """A new hidden folder beside `out` to write in, renamed onto `out` when the block
    ends without error; otherwise removed, with any parent folders made for it, and
    `out` left as it was. Making it is the proof that `out`'s parent can be written."""
    inside = _stages_inside(out)
    made = [] if inside else _make_parents(out)
    name = f".{_stem(out)}.export-{os.getpid()}-{secrets.token_hex(4)}"
    tmp = out / name if inside else out.parent / name
    try:
        tmp.mkdir()
    except OSError as err:
        _remove_empty(made)
        raise UsageError(
            f"out={out}: cannot write in {out.parent} ({err.strerror}); choose a folder you "
            "can write to"
        ) from err
    try:
        yield tmp
        if inside:
            _move_entries_up(tmp, out)
        else:
            _move_into_place(tmp, out, replace)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_empty(made)
        code = None if isinstance(err, SpiralError) else refused_write(err)
        if code is not None:  # an OSError, or safetensors' own error naming one
            raise ExportWriteError(
                f"writing the export failed ({os.strerror(code)}); {out} is unchanged: free "
                "space or make the folder writable, or choose another out"
            ) from err
        raise


def _move_into_place(tmp: Path, out: Path, replace: bool) -> None:
    """Rename the finished folder onto `out`. An old folder (replace=true) is renamed
    aside first and removed only once the new one is in place, so `out` is at every
    moment the old folder or the new export, never a mix of the two."""
    old = tmp.with_name(tmp.name.replace(".export-", ".old-", 1)) if replace else None
    try:
        if old is not None and _entries(out):
            out.rename(old)
        os.replace(tmp, out)  # onto nothing or an empty folder; a folder filled since fails
    except BaseException as err:  # a full disk, or Ctrl-C between the two renames
        if old is not None and old.exists() and not out.exists():
            old.rename(out)
        if not isinstance(err, OSError):
            raise
        raise UsageError(
            f"out={out}: the export could not be moved into place ({err.strerror}); "
            f"{out} is unchanged; export into a new folder, or pass replace=true"
        ) from err
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _stem(out: Path) -> str:
    """`out`'s name in its hidden folders' names; a long one (which, with the suffix,
    would pass the file system's limit) by a hash of it."""
    if len(os.fsencode(out.name)) <= 160:
        return out.name
    return "export-of-" + hashlib.sha256(os.fsencode(out.name)).hexdigest()[:16]


def _remove_killed_exports(out: Path) -> None:
    """Remove the staging and set-aside folders of exports to `out` whose process is gone
    (killed before it could clean up): `.NAME.export-PID-*` and `.NAME.old-PID-*`; a
    set-aside old `out` whose replacement never arrived is put back instead."""
    stem = _stem(out)
    pattern = f".{glob.escape(stem)}.*-*-*"
    try:  # best effort: an `out` that cannot exist (a name too long) is check_out's to say
        found = [*out.parent.glob(pattern), *(out.glob(pattern) if out.is_dir() else [])]
    except OSError:
        return
    for path in found:
        kind, _, rest = path.name[len(stem) + 2 :].partition("-")
        pid = rest.split("-", 1)[0]
        if kind not in ("export", "old") or not pid.isdigit() or _alive(int(pid)):
            continue
        if kind == "old" and not out.exists():  # killed between the renames: put it back
            path.rename(out)
        else:
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _move_entries_up(tmp: Path, out: Path) -> None:
    """Move the finished export from `tmp`, inside `out`, into `out` itself: the run file
    first (a folder holding it without the marker is refused as an unfinished export),
    the `COMPLETE` marker last, then remove `tmp`."""
    names = sorted(p.name for p in tmp.iterdir())
    order = [RUN_FILE] + [n for n in names if n not in (RUN_FILE, COMPLETE)] + [COMPLETE]
    for name in order:
        os.rename(tmp / name, out / name)
    tmp.rmdir()


def _learner(config: dict[str, Any], ckpt: Path) -> Any:
    from spiral.engines import registry
    from spiral.engines.loading import ModelConfig

    learner = registry.learner(
        registry.DEFAULT,
        ModelConfig(
            model=config.get("model_name", "embedded"),
            lora_rank=int(config.get("lora_rank", 0)),
            lora_alpha=int(config.get("lora_alpha", 0)) or None,
            device="cpu",
        ),
    )
    learner.load(ckpt / "learner")
    return learner


def _export_weights(ckpt: Path, config: dict[str, Any], weights: str, folder: Path) -> None:
    """The merged weights and tokenizer of the checkpoint into `folder`."""
    learner = _learner(config, ckpt)
    if weights != "averaged":
        learner.export(folder)
        return
    # The decay matters only for folding in more steps, which export does not.
    decay = float(config.get("weight_ema_decay", 0.0)) or 0.5
    average = WeightAverage.load(ckpt / "learner" / AVERAGED, learner, decay)
    if average is None:
        raise CheckpointError(
            f"{ckpt} holds no averaged weights (the run had weight_ema_decay=0); "
            "export weights=live"
        )
    with average.swapped_into(learner):
        learner.export(folder)


def write_export(folder: Path, ckpt: Path, state: LoopState, weights: str) -> None:
    """Everything the export holds, into the empty staging `folder`, checked and sealed."""
    # The run's settings travel with the export (`spiral eval checkpoint=OUT` uses them);
    # written first, so a folder whose export was killed says it is unfinished.
    run = {"config": state.config, "step": state.step, "weights": weights, SEALED: True}
    (folder / RUN_FILE).write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
    _export_weights(ckpt, state.config, weights, folder)
    kind = "merged model" + (" (averaged weights)" if weights == "averaged" else "")
    (folder / CARD).write_text(model_card(state.config, state.step, kind), encoding="utf-8")
    problems = model_folder_problems(folder)
    if problems:
        raise IncompleteModelFolder(
            f"the export of {ckpt} came out incomplete ({'; '.join(problems)}); "
            "nothing was written to out"
        )
    write_manifest(folder)  # every file's size and hash, sealed by the marker
    (folder / COMPLETE).write_text(seal(folder), encoding="utf-8")


def main(argv: Sequence[str]) -> int:
    if wants_help(argv):
        print(help_text(ExportArgs, "export"))
        return 0
    args = parse_command(ExportArgs, argv, "export")
    out = Path(os.path.abspath(Path(args.out).expanduser()))
    ckpt = resolve_checkpoint(Path(args.checkpoint))
    _remove_killed_exports(out)
    state = verified_loop_state(ckpt)  # every file as the checkpoint wrote it
    refuse_sources(out, ckpt, state.config)
    check_out(out, args.replace, keep=(ckpt, Path.cwd()))
    with staged(out, args.replace) as folder:
        write_export(folder, ckpt, state, args.weights)
    print(f"exported {ckpt} ({args.weights} weights) -> {out}")
    return 0
