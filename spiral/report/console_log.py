"""The run's console, kept: what `spiral train` prints also goes to `RUN/console.log`.

A run folder should tell its own story after the terminal is gone: the progress lines,
evaluations, warnings, the before/after summary and the one-line error a run stopped on.
`kept_in(path)` copies every write to Python's stdout and stderr into `path` (appended,
so a resumed run continues the same file, with a line marking where each start began)
and restores both on exit. Output written below Python (a C library printing to file
descriptor 1) is not copied. A log the disk refuses stops being written; the terminal
and the run go on.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from spiral.errors import SpiralError


class _Tee:
    """A text stream that writes to the terminal stream and to the log file."""

    def __init__(self, stream: IO[str] | None, log: IO[str]) -> None:
        self._stream, self._log = stream, log
        self.log_refused = False

    def write(self, text: str) -> int:
        # The terminal first; the log while it is open (a logging handler made inside the
        # block may keep this stream after it, when the file is closed). A terminal that
        # went away (closed after SIGHUP: EIO; a closed pipe) is dropped and the log goes on.
        if self._stream is not None:
            try:
                self._stream.write(text)
            except (OSError, ValueError):
                self._stream = None
        if not self._log.closed and not self.log_refused:
            try:
                self._log.write(text)
                self._log.flush()
            except OSError:  # a full disk: the terminal goes on, the log stops here
                self.log_refused = True
        return len(text)

    def flush(self) -> None:
        if self._stream is not None:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self._stream = None

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, ...
        return getattr(self._stream if self._stream is not None else self._log, name)


@contextlib.contextmanager
def kept_in(path: Path) -> Iterator[None]:
    """Copy stdout and stderr into `path` while the block runs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    log = path.open("a", encoding="utf-8", errors="replace")
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Tee(out, log), _Tee(err, log)
    _append(log, f"---- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(sys.argv)}\n")
    try:
        yield
    except SpiralError as failed:  # the line the CLI prints once the block has ended
        _append(log, f"error: {failed}\n")
        raise
    finally:
        sys.stdout, sys.stderr = out, err
        with contextlib.suppress(OSError):  # a full disk: what was kept stays kept
            log.close()


def _append(log: IO[str], text: str) -> None:
    with contextlib.suppress(OSError):
        log.write(text)
        log.flush()
