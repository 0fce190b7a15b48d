"""Every command-line key of every command, given values generated from its type as a
careless or hostile user would type them: each is parsed into a config whose values
cannot hurt later (numbers finite, choices from their lists), or refused with one line
(a `SpiralError`, which the command prints as `spiral CMD: ...` and exits 2). Never
another exception, which the user would see as a traceback."""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, get_args, get_origin

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spiral.agents.human import PlayArgs
from spiral.args import _fields, _paths, parse_command
from spiral.bench.cli import BenchArgs
from spiral.errors import SpiralError
from spiral.evaluation.eval_args import EvalArgs
from spiral.report.run_report import ReportArgs
from spiral.serving.server import ServeArgs
from spiral.train.config import TrainConfig, parse_config
from spiral.train.export import ExportArgs
from spiral.train.seeds import SeedsArgs

NASTY = ["", " ", "None", "nan", "-nan", "inf", "-inf", "1e309", "-1e309", "1e-400", "0x10",
         "1_000", "1,5", "٣", "+7", "07", " 7", "true", "--help", "=", "a=b", "\x00", "\n",
         "\udcff", "x" * 5000, "-1", "0", "2147483648", "9" * 400]  # fmt: skip


def _values(tp: Any) -> st.SearchStrategy[str]:
    """Strings for a field of type `tp`: well-formed ones of that type and hostile ones."""
    origin, args = get_origin(tp), get_args(tp)
    hostile = st.one_of(st.sampled_from(NASTY), st.text(max_size=40))
    if isinstance(getattr(tp, "SYNTAX", None), str):  # a schedule: its forms, numbers hostile
        number = st.floats().map(repr) | st.sampled_from(NASTY)
        return st.one_of(
            number,
            st.tuples(number, number).map("->".join),
            st.tuples(number, number).map(lambda ab: "cosine:" + "->".join(ab)),
            st.tuples(number, number, st.integers(-5, 10**6)).map(
                lambda t: f"{t[0]}*{t[1]}@{t[2]}"
            ),
            hostile,
        )
    if origin is Literal:
        return st.one_of(st.sampled_from([str(a) for a in args]), hostile)
    if origin in (types.UnionType, typing.Union):
        inner = [_values(a) for a in args if a is not type(None)]
        return st.one_of(st.just("None"), *inner)
    if origin is tuple:
        return st.lists(_values(args[0]), max_size=4).map(",".join) | hostile
    if tp is bool:
        return st.sampled_from(["true", "false", "True", "1", "yes", "on", "maybe"]) | hostile
    if tp is int:
        return st.integers(-(2**70), 2**70).map(str) | hostile
    if tp is float:
        return st.floats().map(repr) | st.floats(-1e6, 1e6).map(str) | hostile
    return hostile


REQUIRED = {
    "eval": ["checkpoint=base"],
    "serve": ["checkpoint=base"],
    "export": ["checkpoint=base", "out=/tmp/spiral-fuzz-export"],
    "play": [],
    "report": ["run=/tmp/spiral-fuzz-run"],
    "seeds": [],
    "bench": [],
}
CLASSES: dict[str, type] = {
    "train": TrainConfig,
    "eval": EvalArgs,
    "serve": ServeArgs,
    "export": ExportArgs,
    "play": PlayArgs,
    "report": ReportArgs,
    "seeds": SeedsArgs,
    "bench": BenchArgs,
}


def _parser(command: str) -> Callable[[list[str]], Any]:
    """The command's own front door: train's adds presets and retired keys."""
    if command == "train":
        return parse_config
    return lambda argv: parse_command(CLASSES[command], argv, command)


def _cases() -> list[tuple[str, str]]:
    return [(cmd, key) for cmd in CLASSES for key in sorted(_fields(CLASSES[cmd]))]


def _safe(value: Any) -> bool:
    """A parsed value that cannot hurt later: no NaN or infinity anywhere in it."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, tuple | list):
        return all(_safe(v) for v in value)
    if isinstance(getattr(value, "values", None), tuple):  # a schedule: every value it takes
        return all(_safe(v) for v in value.values)
    return True


def test_every_command_and_key_is_covered() -> None:
    cases = _cases()
    assert {cmd for cmd, _ in cases} == set(CLASSES)
    assert len(cases) > 140  # every key of every command, not a sample


@pytest.mark.parametrize("command", sorted(CLASSES))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_values_are_parsed_safely_or_refused_in_one_line(
    command: str, data: st.DataObject
) -> None:
    fields = _fields(CLASSES[command])
    keys = data.draw(st.lists(st.sampled_from(sorted(fields)), min_size=1, max_size=3))
    words = [f"{key}={data.draw(_values(fields[key].final_type), label=key)}" for key in keys]
    parse = _parser(command)
    try:
        config = parse([*REQUIRED.get(command, []), *words])
    except SpiralError as err:
        message = str(err)
        assert message and "\n" not in message.strip(), message
        assert "Traceback" not in message
        return
    for key in keys:
        value = config
        for part in _path(command, key).split("."):
            value = getattr(value, part) if value is not None else None  # a mode left off
        assert _safe(value), f"{key}={value!r} accepted"


def _path(command: str, key: str) -> str:
    return _paths(CLASSES[command])[key][0]


def test_an_integer_too_large_is_named_as_too_large() -> None:
    with pytest.raises(SpiralError, match="of at most 19 digits"):
        parse_config([f"batch_size={2**70}"])
