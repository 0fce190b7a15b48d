"""Errors a user can fix: the message names the problem and what to do about it.

Every such error derives from `SpiralError`; the `spiral` command prints it as one line
and exits with status 2 (`--debug` or SPIRAL_DEBUG=1 shows the traceback). Anything else
that escapes is a bug and keeps its traceback. Subclasses also derive from the builtin
they refine (ValueError, FileNotFoundError, ...) so existing `except` clauses still hold.
docs/reliability.md lists the cases, command by command.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence


class SpiralError(Exception):
    """A problem with the input (config, files, checkpoints, weights) that the user fixes."""


class UsageError(SpiralError, ValueError):
    """A command line that does not parse or names something that does not exist."""


def did_you_mean(word: str, names: Sequence[str], suffix: str = "") -> str:
    """The end of an error message: the closest valid name, or the valid names."""
    close = difflib.get_close_matches(word, list(names), n=1)
    if close:
        return f"did you mean {close[0]}{suffix}?"
    return f"valid keys: {', '.join(names)}" if suffix else f"choose one of {', '.join(names)}"


class AgentSpecError(SpiralError, KeyError, ValueError):
    """An agent spec that names no agent that can be built (`optimal` for a game without
    one, `api:` without a model); a KeyError and a ValueError for older `except`s."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class LearnerOutOfMemory(SpiralError, RuntimeError):
    """A learning step that ran out of GPU memory where it could not run again by itself
    (a fixed micro-batch size, or gradients held from an earlier call of the step)."""
