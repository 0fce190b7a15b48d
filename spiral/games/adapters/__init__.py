"""Adapters that expose external game libraries as Spiral States."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from spiral.errors import SpiralError, UsageError


class UnknownGameError(UsageError, KeyError):
    """A game id that names no game; a KeyError too, for older `except`s."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class LibraryFailure(SpiralError, RuntimeError):
    """A game library failed inside its own code while playing a move (a bug of that
    library, not a bad answer): said in one line, with the game and the move."""


@contextlib.contextmanager
def quiet_native_output() -> Iterator[None]:
    """Hold back what a game library prints while it builds a game (OpenSpiel's C++ code
    prints every failure to stderr before raising it; TextArena's envs print their data
    downloads and puzzle generation): the outcome is said once, in one line, by the
    caller. File descriptors 1 and 2 are pointed at the null device; `sys.stdout` and
    `sys.stderr` stay the same objects, so nothing keeps a closed stream."""
    with contextlib.ExitStack() as stack:
        for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
            stack.enter_context(_quiet(fd, stream))
        yield


@contextlib.contextmanager
def _quiet(fd: int, stream: object) -> Iterator[None]:
    flush = getattr(stream, "flush", None)
    if callable(flush):
        flush()
    try:
        saved = os.dup(fd)
    except OSError:  # no such descriptor to hold back
        yield
        return
    try:
        with open(os.devnull, "w") as sink:
            os.dup2(sink.fileno(), fd)
            try:
                yield
            finally:
                flush = getattr(stream, "flush", None)
                if callable(flush):
                    flush()
                os.dup2(saved, fd)
    finally:
        os.close(saved)


def first_line(err: BaseException) -> str:
    """An exception's first line, for a one-line message (its type where it says nothing)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip(" *")]
    return lines[0][:200] if lines else type(err).__name__
