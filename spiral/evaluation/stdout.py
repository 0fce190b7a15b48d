"""Standard output that cannot lose an evaluation: `spiral eval ... > /dev/full` (or a
redirect onto a disk that fills) used to end in a traceback at the first line printed,
before any game, and an evaluation that got further lost its results with it.

`KeptStdout` stands in for `sys.stdout` while `spiral eval` runs: the first write the
device refuses is kept (`lost`) instead of raised, file descriptor 1 is pointed at the
null device so nothing buffered fails again at exit, and the command goes on to save its
results to their file; it then says in one line on stderr that standard output refused
them and where they are. A closed pipe (`spiral eval ... | head`) is not a refusal: it is
raised as before, for the `spiral` command's own handling.
"""

from __future__ import annotations

import io
import os
from typing import Any, TextIO


class KeptStdout(io.TextIOBase):
    """`sys.stdout` that keeps, rather than raises, a write its device refuses."""

    def __init__(self, real: TextIO) -> None:
        super().__init__()
        self.real = real
        self.lost: str | None = None  # why standard output refused, once it has

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self.lost is None:
            self._guarded(self.real.write, text)
        return len(text)

    def flush(self) -> None:
        if self.lost is None:
            self._guarded(self.real.flush)

    def isatty(self) -> bool:
        return self.lost is None and self.real.isatty()

    def fileno(self) -> int:
        return self.real.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]  # TextIOBase declares it read-only
        return str(getattr(self.real, "encoding", "utf-8") or "utf-8")

    def _guarded(self, call: Any, *args: Any) -> None:
        try:
            call(*args)
        except BrokenPipeError:
            raise
        except OSError as err:
            self.lost = err.strerror or str(err)
            self._silence()

    def _silence(self) -> None:
        """Point file descriptor 1 at the null device: what is still buffered then goes
        nowhere, and the interpreter's flush at exit does not fail again."""
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self.real.fileno())
            os.close(null)
            self.real.flush()
        except (OSError, ValueError, io.UnsupportedOperation):
            pass  # no descriptor to point elsewhere (a test's capture): nothing to flush
