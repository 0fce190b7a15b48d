"""The run's console, kept: what `spiral train` prints also goes to `RUN/console.log`.

A run folder should tell its own story after the terminal is gone: the progress lines,
evaluations, warnings and the before/after summary. `kept_in(path)` copies every write to
Python's stdout and stderr into `path` (appended, so a resumed run continues the same
file, with a line marking where each start began) and restores both on exit. Output
written below Python (a C library printing to file descriptor 1) is not copied.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


class _Tee:
    """A text stream that writes to the terminal stream and to the log file."""

    def __init__(self, stream: IO[str] | None, log: IO[str]) -> None:
        self._stream, self._log = stream, log

    def write(self, text: str) -> int:
        # The terminal first; the log while it is open (a logging handler made inside the
        # block may keep this stream after it, when the file is closed). A terminal that
        # went away (closed after SIGHUP: EIO; a closed pipe) is dropped and the log goes on.
        if self._stream is not None:
            try:
                self._stream.write(text)
            except (OSError, ValueError):
                self._stream = None
        if not self._log.closed:
            self._log.write(text)
            self._log.flush()
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
    with path.open("a", encoding="utf-8", errors="replace") as log:
        log.write(f"---- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(sys.argv)}\n")
        out, err = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Tee(out, log), _Tee(err, log)
        try:
            yield
        finally:
            sys.stdout, sys.stderr = out, err
