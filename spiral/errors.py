"""Errors a user can fix: the message names the problem and what to do about it.

Every such error derives from `SpiralError`; the `spiral` command prints it as one line
and exits with status 2 (`--debug` or SPIRAL_DEBUG=1 shows the traceback). Anything else
that escapes is a bug and keeps its traceback. Subclasses also derive from the builtin
they refine (ValueError, FileNotFoundError, ...) so existing `except` clauses still hold.
docs/reliability.md lists the cases, command by command.
"""

from __future__ import annotations

import difflib
import errno
import re
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


# Write failures that are the file system's answer, not a bug: the user frees space or
# makes the folder writable, and what was being written is written again.
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
REFUSED = NO_SPACE | {errno.EROFS, errno.EACCES, errno.EPERM}
# safetensors and tokenizers write from Rust and raise their own exception types, whose
# text ends with the OS error: "... No space left on device (os error 28)".
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def refused_write(err: BaseException) -> int | None:
    """The errno of a write the file system refused (`REFUSED`), found in `err` or the
    errors it was raised from; None for anything else."""
    seen: BaseException | None = err
    for _ in range(8):  # a chain of causes, never a cycle
        if seen is None:
            break
        code = seen.errno if isinstance(seen, OSError) else None
        if code is None and (found := _RUST_OS_ERROR.search(str(seen))):
            code = int(found.group(1))
        if code in REFUSED:
            return code
        seen = seen.__cause__ or seen.__context__
    return None
