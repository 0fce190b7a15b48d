"""The `spiral` command: `spiral <command> key=value ...`, one function per command.

Commands are a small registry of "module:function" targets loaded on demand, so
`spiral play` does not import torch. Each target takes the list of `key=value` strings.

A refused command prints one line, `spiral <command>: <what to do>`, and exits 2. With
`--debug` (or SPIRAL_DEBUG=1) the traceback of what was refused comes first, on stderr:
for a `SpiralError` that reaches this function, and for the refusals a command catches
itself to print its line (train's and eval's checks), whose line is written while the
exception is being handled (`_TracebackFirst`). `--debug` reaches the processes a command
starts (`spiral seeds`' runs) as SPIRAL_DEBUG=1. A reader that closes the pipe
(`spiral train --help | head`) ends the command quietly; a write to a full device that no
command caught (`spiral eval --help > /dev/full`) is one line, exit 1.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import traceback
from collections.abc import Iterator, Sequence
from typing import Any

from spiral import __version__
from spiral.errors import NO_SPACE, SpiralError

COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("spiral.train.run:main", "self-play training (key=value config; --help lists keys)"),
    "eval": ("spiral.evaluation.cli:main", "evaluate a checkpoint or run folder vs opponents"),
    "play": ("spiral.agents.human:main", "play a game in the terminal against an agent"),
    "serve": ("spiral.serving.server:main", "OpenAI-compatible chat endpoint for a checkpoint"),
    "export": ("spiral.train.export:main", "write a merged standalone model folder"),
    "bench": ("spiral.bench.cli:main", "benchmarks: games/s, sampling and learner throughput"),
    "report": ("spiral.report.run_report:main", "plots and a summary for a run folder"),
    "seeds": ("spiral.train.seeds:main", "one training config over several seeds, one table"),
}


def _stdout_open() -> bool:
    """Whether stdout can still be written: a pipe whose reader has gone reports an error
    condition (POLLERR) on our end; a file or a terminal does not."""
    import select

    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return not any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


class _TracebackFirst:
    """stderr under `--debug`: a line starting with `prefix` written while an exception is
    being handled (a command's own `except ...: print("spiral train: ...")`) is preceded
    by that exception's traceback, once per exception."""

    def __init__(self, stream: Any, prefix: str) -> None:
        self._stream, self._prefix = stream, prefix
        self._shown: BaseException | None = None

    def write(self, text: str) -> int:
        handled = sys.exc_info()[1]
        if handled is not None and handled is not self._shown and text.startswith(self._prefix):
            self._shown = handled
            self._stream.write(traceback.format_exc())
        return int(self._stream.write(text))

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, ...
        return getattr(self._stream, name)


@contextlib.contextmanager
def _debugging(name: str) -> Iterator[None]:
    """Tracebacks before the command's refusals, and SPIRAL_DEBUG=1 for the processes it
    starts; stderr and the environment as they were afterwards."""
    stderr, before = sys.stderr, os.environ.get("SPIRAL_DEBUG")
    sys.stderr = _TracebackFirst(stderr, f"spiral {name}: ")
    os.environ["SPIRAL_DEBUG"] = "1"
    try:
        yield
    finally:
        sys.stderr = stderr
        if before is None:
            os.environ.pop("SPIRAL_DEBUG", None)
        else:
            os.environ["SPIRAL_DEBUG"] = before


def _usage() -> str:
    lines = ["usage: spiral <command> key=value ...", "", "commands:"]
    lines += [f"  {name:<8} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "`spiral <command> --help` lists that command's keys."]
    lines += ["`spiral --debug <command> ...` (or SPIRAL_DEBUG=1) shows tracebacks of errors."]
    lines += ["`spiral --version` prints the installed version."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("SPIRAL_DEBUG", "") not in ("", "0")
    args = [a for a in args if a != "--debug"]
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if args[0] in ("-V", "--version", "version"):
        print(f"spiral {__version__}")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"spiral: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    with _debugging(name) if debug else contextlib.nullcontext():
        return _run(name, rest, debug)


def _run(name: str, rest: list[str], debug: bool) -> int:
    """The command `name` on `rest`: its exit status, a refusal as one line (exit 2)."""
    module_name, _, func_name = COMMANDS[name][0].partition(":")
    try:
        func = getattr(importlib.import_module(module_name), func_name)
        result = func(rest)
    except SpiralError as err:
        # A problem the user can fix; its message says how. One line (with --debug,
        # _TracebackFirst writes the traceback before it).
        print(f"spiral {name}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"spiral {name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        if _stdout_open():
            raise  # another pipe broke (a worker, a socket): a real failure
        # Our reader went away (`spiral train --help | head`): nothing left to say, the
        # exit's flush must not fail again, and the status is a SIGPIPE death's.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as err:
        if debug or err.errno not in NO_SPACE:
            raise
        # A write the device refused that no command caught (help or a table printed to a
        # full device, `> /dev/full`): said in one line, not a traceback.
        print(
            f"spiral {name}: a write failed ({err.strerror}): the disk, or the device standard "
            "output goes to, is full; free space there and run the command again",
            file=sys.stderr,
        )
        return 1
    return int(result or 0)


if __name__ == "__main__":
    raise SystemExit(main())
