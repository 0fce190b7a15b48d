"""The one front door: every command parses key=value through spiral.args.parse_command
over its typed chz config, so unknown keys, mistyped values and closed choices are
refused in one line, and --help lists every key from the config itself."""

from __future__ import annotations

from typing import Literal

import chz
import pytest

from spiral.agents.human import PlayArgs
from spiral.algo import schedule
from spiral.args import UsageError, describe_type, groups, help_text, parse_command, positive
from spiral.bench.cli import BenchArgs
from spiral.cli import main as cli_main
from spiral.evaluation.eval_args import EvalArgs
from spiral.report.run_report import ReportArgs
from spiral.serving.server import ServeArgs
from spiral.train.config import TrainConfig
from spiral.train.export import ExportArgs
from spiral.train.recipes import RECIPES

COMMANDS = {
    "train": TrainConfig,
    "eval": EvalArgs,
    "play": PlayArgs,
    "serve": ServeArgs,
    "export": ExportArgs,
    "bench": BenchArgs,
    "report": ReportArgs,
}


@chz.chz
class _Example:
    """usage: spiral example"""

    name: str = chz.field(doc="a name")
    size: int = chz.field(default=2, doc="how many", validator=positive)
    mode: Literal["fast", "exact"] = chz.field(default="fast", doc="which way")
    rate: float | None = chz.field(default=None, doc="optional rate")
    tags: tuple[str, ...] = chz.field(default=(), doc="labels")


def test_values_are_typed_and_converted() -> None:
    ex = parse_command(_Example, ["name=a", "size=3", "mode=exact", "rate=0.5", "tags=x,y"], "ex")
    assert (ex.name, ex.size, ex.mode, ex.rate, ex.tags) == ("a", 3, "exact", 0.5, ("x", "y"))
    assert parse_command(_Example, ["name=a", "rate=None"], "ex").rate is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["name=a", "sise=3"], "unknown key 'sise'; did you mean size=?"),
        (["name=a", "size=three"], "size='three' is not valid: expected an integer"),
        (["name=a", "size=0"], "size must be > 0, got 0"),
        (["name=a", "mode=slow"], "mode='slow' is not valid: expected one of fast, exact"),
        (["name=a", "rate=high"], "expected a finite number (or None)"),
        (["name=a", "rate=nan"], "rate='nan' is not valid: expected a finite number"),
        (["name=a", "rate=inf"], "rate='inf' is not valid: expected a finite number"),
        (["name=a", "rate=-Infinity"], "expected a finite number"),
        (["name=a", "rate=1e999"], "rate='1e999' is not valid"),
        (["name=a", "size"], "'size' is not key=value; see `spiral ex --help`"),
        (["size=3"], "name= is required (a name)"),
    ],
)
def test_bad_command_lines_are_one_line_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_command(_Example, argv, "ex")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_help_is_generated_from_the_fields() -> None:
    text = help_text(_Example, "ex")
    assert text.startswith("usage: spiral example")
    assert "  mode ('fast'; one of fast, exact): which way" in text
    assert "  name (required; a string)" in text
    assert describe_type(tuple[int, ...]) == "a comma-separated list of integers"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_uses_the_front_door(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main([command, "--help", "all"]) == 0
    text = capsys.readouterr().out
    for _, _, keys in groups(COMMANDS[command]):
        for name in keys:
            assert f"\n  {name} (" in text, f"spiral {command} --help lacks {name}"
    assert cli_main([command, "no_such_key=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"spiral {command}: unknown key 'no_such_key'") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "answer_format=boxd"], "expected one of boxed, bracket, constrained"),
        (["train", "loss_fn=grpo"], "expected one of importance_sampling, ppo"),
        (["train", "template=qwen"], "expected one of chat, qwen3"),
        (["train", "invalid_move_policy=lenient"], "expected one of spiral, strict, loss"),
        (["train", "dtype=fp8"], "expected one of auto, float32, bfloat16, float16"),
        (["train", "device=tpu"], "choose auto, cpu, cuda or cuda:N"),
        (["train", "eval_opponent_names=rando"], "unknown opponent 'rando'"),
        (["train", "max_turns=-1"], "max_turns must be >= 0"),
        (["train", "lr_schedule=step"], "lr_step_at > 0"),
        (["eval", "checkpoint=base", "answer_format=free"], "expected one of boxed"),
        (["play", "seat=2"], "seat must be 0 or 1"),
        (["export", "checkpoint=x", "out=y", "weights=ema"], "expected one of live, averaged"),
        (
            ["bench", "what=gpu"],
            "expected one of games, engine, selfplay, pool, prefix_cache, async, vllm, all",
        ),
        (["bench", "dtypes=float16"], "expected auto, or float32 and/or bfloat16"),
        (["serve", "checkpoint=base", "device=gpu"], "choose auto, cpu, cuda or cuda:N"),
    ],
)
def test_closed_choices_are_refused_with_the_valid_ones(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_train_help_opens_with_the_core_then_each_group_under_its_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli_main(["train", "--help"]) == 0
    short = capsys.readouterr().out
    assert len(short.splitlines()) < 60 and max(map(len, short.splitlines())) <= 100
    assert all(f"  {name}: " in short for name in RECIPES)  # the recipes, listed
    assert cli_main(["train", "--help", "all"]) == 0
    text = capsys.readouterr().out
    found = groups(TrainConfig)
    core = found[0][2]
    assert found[0][0] == "" and len(core) <= 26 and "model_name" in core
    last = max(text.index(f"\n  {k} (") for k in core)
    for name, doc, keys in found[1:]:
        heading = text.index(f"\n{name}: {doc}\n")
        assert heading > last  # every group after the core keys, in order
        assert all(heading < text.index(f"\n  {k} (") for k in keys)
        assert f"\n  {name} (" in short  # and named in the short help
        last = heading
    # The original's flat names keep working, each reaching its group.
    cfg = parse_command(
        TrainConfig, ["fsp_enabled=true", "fsp_pool_size=7", "kl_coef=0.1"], "train"
    )
    assert cfg.population is not None and cfg.population.fsp_pool_size == 7
    assert cfg.regularizer.kl_coef == schedule.constant(0.1)
