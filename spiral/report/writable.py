"""Places a command will write, checked before the work.

A command that evaluates or trains for minutes and then cannot write its result has lost
the minutes. So each place a command writes (a report file, an output folder, a run
folder and the files a run appends to) is checked first, by doing what the write will
do short of leaving anything behind:

- a file that exists is opened for appending and closed: nothing is written, truncated
  or created, and a folder in its place is refused;
- a file or folder that does not exist yet: its nearest existing folder takes a new
  temporary file, removed at once, and each missing name is held to the file system's
  length limit (nothing is created, so a refused command leaves no empty folders);
- a file a run keeps in its folder and writes again on every start (`check_run_files`)
  must be a file of the run's own: a link would carry the run's writes to the file it
  points at, outside the run.

A problem is an `UnwritablePath`: one line naming the key and the path, what is wrong,
and what to do.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

from spiral.errors import SpiralError

PROBE_PREFIX = ".spiral-write-check-"


class UnwritablePath(SpiralError, OSError):
    """A place a command was asked to write where it cannot write."""

    def __str__(self) -> str:  # OSError would format (errno, strerror)
        return str(self.args[0]) if self.args else ""


def check_writable_file(path: Path | str, key: str = "") -> None:
    """`path` can be written as a file (created, replaced or appended to); `key` is the
    command-line key that named it (`out`), for the message."""
    try:
        _probe_file(Path(path))
    except OSError as err:
        raise UnwritablePath(_problem(Path(path), key, err)) from None


def check_writable_folder(path: Path | str, key: str = "") -> None:
    """`path` is, or can be made, a folder that takes new files."""
    try:
        _probe_folder(Path(path))
    except OSError as err:
        raise UnwritablePath(_problem(Path(path), key, err)) from None


def check_utf8_name(path: Path | str, key: str, why: str) -> None:
    """`path` (made absolute) is text in UTF-8: some writers take only such paths (the
    Rust code of safetensors and tokenizers), so a name holding another byte (a Latin-1
    file name, say) would fail at the first save; `why` says which."""
    absolute = os.path.abspath(path)
    try:
        absolute.encode("utf-8")
    except UnicodeEncodeError:
        raise UnwritablePath(
            f"cannot write {key}={os.fsencode(absolute)!r}: its name holds bytes that are not "
            f"UTF-8, and {why} take UTF-8 names only; choose a name in UTF-8"
        ) from None


def check_run_files(folder: Path, names: Sequence[str]) -> None:
    """Each of `names` inside `folder`, where present, is a writable file of the
    folder's own, not a link (whose target a write would change)."""
    for name in names:
        path = folder / name
        if path.is_symlink():
            raise UnwritablePath(
                f"{path} is a link (to {os.readlink(path)}); a run writes only files of its "
                "own: put a copy of the file itself in its place, or remove the link"
            )
        check_writable_file(path)


def _stat(path: Path) -> os.stat_result | None:
    """The path's status (links followed), or None where nothing is there."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _probe_file(path: Path) -> None:
    found = _stat(path)
    if found is None:
        _probe_missing(path)
    elif stat.S_ISDIR(found.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a folder, not a file")
    elif stat.S_ISFIFO(found.st_mode) or stat.S_ISSOCK(found.st_mode):
        # without a reader the command's last write would wait for ever, and opening it
        # to find out would end a reader's stream: refused unopened
        raise OSError(errno.ESPIPE, "is a pipe or socket, not a file")
    elif not stat.S_ISREG(found.st_mode):  # a device (/dev/null, a terminal): asked
        if not os.access(path, os.W_OK):
            raise PermissionError(errno.EACCES, "is not writable")
    else:  # no O_TRUNC, O_NONBLOCK: nothing is written or truncated
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK))


def _probe_folder(path: Path) -> None:
    found = _stat(path)
    if found is None:
        _probe_missing(path)
    elif not stat.S_ISDIR(found.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "is a file, not a folder")
    else:
        _probe_create(path)


def _probe_missing(path: Path) -> None:
    """A path not there yet: its nearest existing folder takes a new file and no name
    still to be made is longer than that file system allows."""
    _refuse_dangling(path)
    folder, missing = path.parent, [path.name]
    while (found := _stat(folder)) is None:
        _refuse_dangling(folder)
        folder, missing = folder.parent, [*missing, folder.name]
    if not stat.S_ISDIR(found.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, f"{folder} is a file, not a folder")
    limit = os.pathconf(folder, "PC_NAME_MAX")
    longest = max(len(os.fsencode(name)) for name in missing)
    if longest > limit:
        raise OSError(
            errno.ENAMETOOLONG,
            f"a name in it is {longest} bytes long; this file system allows {limit}",
        )
    _probe_create(folder)


def _refuse_dangling(path: Path) -> None:
    """A file or folder to be made where a link to nothing stands: refused (a folder
    cannot be made there, and a file would be made wherever the link points)."""
    if path.is_symlink():
        raise FileExistsError(
            errno.EEXIST, f"{path} is a link to {os.readlink(path)}, which does not exist"
        )


def _probe_create(folder: Path) -> None:
    try:
        handle, name = tempfile.mkstemp(prefix=PROBE_PREFIX, dir=folder)
    except OSError as err:
        raise OSError(err.errno, f"{folder} takes no new files ({err.strerror})") from None
    os.close(handle)
    os.unlink(name)


def _problem(path: Path, key: str, err: OSError) -> str:
    """The one line: where, what is wrong, what to do."""
    where = f"{key}={path}" if key else str(path)
    fix = {  # a path the user named can be named again; a file inside one can be moved
        errno.EISDIR: "name a file, or move the folder away" if key else "move that folder away",
        errno.ENOTDIR: "name a folder, or move the file away" if key else "move that file away",
        errno.ENAMETOOLONG: "choose a shorter name",
        errno.ESPIPE: "name a regular file",
        errno.EEXIST: "make the folder the link points to, or remove the link",
    }.get(err.errno or 0, "choose a place you can write to")
    return f"cannot write {where}: {err.strerror or err}; {fix}"
