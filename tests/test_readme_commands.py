"""Every `spiral` command the README shows still parses: its keys are today's keys and
its values valid (nothing runs). A renamed or retired key would break a reader's first
command, so it breaks this test first."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _parsers() -> dict[str, Callable[[list[str]], Any]]:
    from spiral.agents.human import PlayArgs
    from spiral.args import parse_command
    from spiral.bench.cli import BenchArgs
    from spiral.evaluation.eval_args import parse_eval_args
    from spiral.report.run_report import ReportArgs
    from spiral.serving.server import ServeArgs
    from spiral.train.config import parse_config
    from spiral.train.export import ExportArgs
    from spiral.train.seeds import SeedsArgs

    def plain(cls: Any, name: str) -> Callable[[list[str]], Any]:
        return lambda argv: parse_command(cls, argv, name)

    return {
        "train": parse_config,
        "eval": parse_eval_args,
        "play": plain(PlayArgs, "play"),
        "report": plain(ReportArgs, "report"),
        "serve": plain(ServeArgs, "serve"),
        "export": plain(ExportArgs, "export"),
        "bench": plain(BenchArgs, "bench"),
        "seeds": lambda argv: (
            plain(SeedsArgs, "seeds")([w for w in argv if w.split("=")[0] in SEEDS_OWN]),
            parse_config([w for w in argv if w.split("=")[0] not in SEEDS_OWN]),
        ),
    }


SEEDS_OWN = ("seeds", "out", "metrics", "table_only")


def readme_commands(text: str) -> list[list[str]]:
    """Each `spiral COMMAND key=value ...` in a code block or an inline code span, as the
    words after `spiral`, without comments and shell variables."""
    spans = re.findall(r"```(?:bash|sh)?\n(.*?)```", text, re.S)
    spans += [s.replace("\n", " ") for s in re.findall(r"(?<!`)`([^`]+)`(?!`)", text)]
    found = []
    for span in spans:
        for line in span.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0]
            match = re.search(r"(?:^|\s)spiral (\w+)((?:\s+\S+=\S*)+)", line)
            if match:
                found.append([match.group(1), *shlex.split(match.group(2))])
    return found


COMMANDS = readme_commands(README.read_text(encoding="utf-8"))


def test_the_readme_shows_commands_of_every_kind() -> None:
    kinds = {argv[0] for argv in COMMANDS}
    assert {"train", "eval", "play", "report"} <= kinds, kinds
    assert sum(argv[0] == "train" and len(argv) > 2 for argv in COMMANDS) >= 3


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: " ".join(argv)[:60])
def test_a_readme_command_parses(argv: list[str]) -> None:
    command, *words = argv
    parsers = _parsers()
    assert command in parsers, f"`spiral {command}` in the README is no command"
    words = [w for w in words if "=" in w and not w.endswith("=...")]
    parsers[command](words)


def test_a_retired_key_in_a_readme_command_would_be_found() -> None:
    (argv,) = readme_commands("```bash\nspiral train lr_staleness=inverse\n```\n")
    from spiral.errors import UsageError

    with pytest.raises(UsageError, match="retired"):
        _parsers()["train"](argv[1:])
