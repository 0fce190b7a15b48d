"""One run folder, one run: a lock held by the process that trains in it.

Two `spiral train` processes on one `log_path` would interleave their metrics, overwrite
each other's checkpoints, and each start deletes the unfinished checkpoint writes it
finds (`.tmp-*`), including the other's write in progress. So a run takes an exclusive
`flock` on `RUN/.lock` before touching anything and keeps it until it ends; the file
holds the holder's PID and host for the message a second process gets. The kernel drops
the lock when its process dies, however it dies, so a lock left by a killed run is
simply taken over (the file's stale PID is overwritten). Under torchrun rank 0 holds it
for the run.

`spiral train` takes the lock before it keeps its console in `RUN/console.log`, so a
refused second process writes nothing into the folder it was refused; the loop's own
`run_lock` inside that hold is the same hold (a process holds a folder once).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from spiral.errors import SpiralError

LOCK = ".lock"
_HELD: set[Path] = set()  # the run folders this process holds


class RunFolderBusy(SpiralError, RuntimeError):
    """Another process is training in this run folder."""


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold `run_dir`'s lock for the block; RunFolderBusy if another process holds it.
    Inside a block of this process that holds it already, the block goes on under it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    key = run_dir.resolve()
    if key in _HELD:
        yield
        return
    path = run_dir / LOCK
    handle = path.open("a+", encoding="utf-8")
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise RunFolderBusy(
                f"run folder {run_dir} is in use by {holder}: another spiral train is writing "
                "there. Wait for it to end, stop it, or pass another log_path="
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"process {os.getpid()} on {socket.gethostname()}\n")
        handle.flush()
        _HELD.add(key)
        try:
            yield
        finally:
            _HELD.discard(key)
    finally:
        handle.close()  # closing the file releases the lock
