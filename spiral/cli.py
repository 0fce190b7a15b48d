"""The `spiral` command: `spiral <command> key=value ...`, one function per command.

Commands are a small registry of "module:function" targets loaded on demand, so
`spiral play` does not import torch. Each target takes the list of `key=value` strings.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from spiral import __version__
from spiral.errors import SpiralError

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
    module_name, _, func_name = COMMANDS[name][0].partition(":")
    try:
        func = getattr(importlib.import_module(module_name), func_name)
        result = func(rest)
    except SpiralError as err:
        # A problem the user can fix; its message says how. One line, no traceback.
        if debug:
            raise
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
    return int(result or 0)


if __name__ == "__main__":
    raise SystemExit(main())
