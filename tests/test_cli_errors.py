"""The `spiral` command answers user errors in one line (exit 2), not with a traceback;
`--debug` brings the traceback back. Ctrl-C at start-up exits quietly (130)."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import pytest

from spiral import cli
from spiral.errors import SpiralError


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_missing_checkpoint_for_play_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    err = _one_line_error(
        capsys, ["play", "game=TicTacToe-v0", f"opponent=checkpoint:{tmp_path / 'nope'}"]
    )
    assert "does not exist" in err


def test_damaged_checkpoint_for_export_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "step_000002").mkdir()
    err = _one_line_error(
        capsys, ["export", f"checkpoint={tmp_path / 'step_000002'}", f"out={tmp_path / 'o'}"]
    )
    assert "incomplete" in err


def _debug_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[str, str]:
    """`--debug`: exit 2, the traceback on stderr, then the same one line as without."""
    assert cli.main(argv) == 2
    line = capsys.readouterr().err.strip()
    assert cli.main(["--debug", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("Traceback (most recent call last):"), err
    assert err.splitlines()[-1] == line and len(line.splitlines()) == 1
    assert err.count(line) == 1 and err.count(f"{type_name(err)}: ") == 1  # each shown once
    return err, line


def type_name(err: str) -> str:
    """The refused exception's class, from its traceback's last line."""
    return err.splitlines()[-2].partition(":")[0]


def test_debug_shows_the_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(_: list[str]) -> int:
        raise SpiralError("bad input; do this instead")

    real = importlib.import_module

    def fake_import(name: str, *args: Any) -> Any:
        module = real(name, *args)
        if name == "spiral.train.export":
            monkeypatch.setattr(module, "main", boom)
        return module

    monkeypatch.setattr(cli.importlib, "import_module", fake_import)
    err, line = _debug_error(capsys, ["export"])
    assert "in boom" in err and line == "spiral export: bad input; do this instead"


@pytest.mark.parametrize(
    ("argv", "raised_in"),
    [
        (["train", "env_ids=KuhnPokerSingle-v0", "max_steps=-5"], "spiral/args.py"),
        (["train", "env_ids=KuhnPokerSingle-v0", "lr_schedule=step"], "legacy_keys.py"),
        (["eval", "checkpoint=base", "math=gsm9k"], "spiral/evaluation/"),
    ],
)
def test_debug_shows_the_traceback_of_train_and_eval_refusals(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    raised_in: str,
) -> None:
    """train and eval catch their own refusals to print the one line: under `--debug`
    (or SPIRAL_DEBUG=1) the traceback of what was refused comes first."""
    monkeypatch.delenv("SPIRAL_DEBUG", raising=False)
    err, _ = _debug_error(capsys, argv)
    assert raised_in in err
    assert "SPIRAL_DEBUG" not in os.environ  # the command's children had it, not the caller


def test_ctrl_c_at_start_up_exits_quietly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(name: str, *args: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.importlib, "import_module", interrupted)
    assert cli.main(["train", "preset=embedded-kuhn"]) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and "interrupted" in err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["model_name=/no/such/model"], "does not exist"),
        (["device=cuda"], "no CUDA GPU is visible"),
        (["device=tpu"], "is not valid"),
        (["dtype=fp8"], "is not valid"),
        (["max_steps=-5"], ">= 0"),
        (["max_turns=-1"], ">= 0"),
        (["gamma=0"], "(0, 1]"),
        (["weight_ema_decay=1.5"], "[0, 1)"),
        (["private_centering=1"], "private_centering must stay in [0, 1)"),
        (["private_centering_final=1.2"], "private_centering must stay in [0, 1)"),
    ],
)
def test_train_input_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], expected: str
) -> None:
    import torch

    if "device=cuda" in args and torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    base = ["train", "env_ids=KuhnPokerSingle-v0", "max_steps=1", f"log_path={tmp_path / 'r'}"]
    err = _one_line_error(capsys, [*base, *args])
    assert expected in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["play", "gmae=TicTacToe-v0"], "did you mean game=?"),
        (["play", "game=TicTacToe-v0", "bogus=1"], "unknown key 'bogus'"),
        (["export", "checkpoint=x", "out=y", "wieghts=live"], "did you mean weights=?"),
        (["export", "checkpoint=x", "out"], "is not key=value"),
        (["eval", "checkpoint=base", "math=gsm9k"], "is not a file"),
    ],
)
def test_unknown_or_malformed_arguments_are_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    assert expected in _one_line_error(capsys, argv)


def test_machine_errors_come_before_any_model_work(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad device, a half dtype this CPU would emulate (the suite runs as a CPU without
    bf16), a missing local folder or a sink without its package is refused before the
    embedded model is converted (an empty model cache stays empty)."""
    import importlib.util

    import torch

    cache = tmp_path / "cache"
    monkeypatch.setenv("SPIRAL_CACHE", str(cache))
    base = ["train", "env_ids=KuhnPokerSingle-v0", "max_steps=1", f"log_path={tmp_path / 'r'}"]
    if not torch.cuda.is_available():
        assert "no CUDA GPU is visible" in _one_line_error(capsys, [*base, "device=cuda"])
    emulated = _one_line_error(capsys, [*base, "dtype=bfloat16"])
    assert "dtype=bfloat16" in emulated and "use dtype=auto or float32" in emulated
    missing = _one_line_error(capsys, [*base, "model_name=runs/x/checkpoints/step_000002"])
    assert "does not exist" in missing
    real_find_spec = importlib.util.find_spec

    def without_tensorboard(name: str, *args: Any) -> Any:
        return None if name == "tensorboard" else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_tensorboard)
    err = _one_line_error(capsys, [*base, "tensorboard=true"])
    assert "pip install 'spiral-selfplay[tensorboard]'" in err
    assert not cache.exists() or not any(cache.iterdir())


def test_python_dash_m_is_the_command() -> None:
    import subprocess
    import sys

    from spiral import __version__

    done = subprocess.run(
        [sys.executable, "-m", "spiral", "--version"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == f"spiral {__version__}"


def test_version_and_a_presets_help(capsys: pytest.CaptureFixture[str]) -> None:
    from spiral import __version__

    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"spiral {__version__}"
    assert cli.main(["train", "preset=embedded-kuhn", "lora_rank=8", "--help"]) == 0
    text = capsys.readouterr().out
    assert (
        "  learning_rate (set: cosine:0.0003->3e-05; a number or a schedule" in text
    )  # the recipe's
    assert "  lora_rank (set: 8; an integer)" in text  # the command line's
    assert "  seed (0; an integer)" in text  # untouched keys keep their default


def test_a_closed_reader_ends_quietly_other_broken_pipes_do_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`spiral train --help | head`: the reader went away, exit 141 with nothing printed;
    a pipe that breaks elsewhere (a worker, a socket) is a real failure."""
    import subprocess
    import sys

    proc = subprocess.run(
        f"{sys.executable} -m spiral.cli train --help | head -1",
        shell=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.stdout.startswith("usage: spiral train") and proc.stderr == ""

    def worker_pipe(_: list[str]) -> int:
        raise BrokenPipeError("a worker's pipe")

    real = importlib.import_module

    def fake_import(name: str, *args: Any) -> Any:
        module = real(name, *args)
        if name == "spiral.train.export":
            monkeypatch.setattr(module, "main", worker_pipe)
        return module

    monkeypatch.setattr(cli.importlib, "import_module", fake_import)
    with pytest.raises(BrokenPipeError):
        cli.main(["export"])


@pytest.mark.parametrize(
    ("name", "hub"),
    [
        ("gpt2", True),
        ("Qwen/Qwen3-4B-Base", True),
        ("runs/x/checkpoints/step_000002", False),  # more than one /: a path
        ("./model", False),
        ("~/models/qwen", False),
        ("a b", False),
        ("x..y", False),
        ("tests/anything", False),  # its first part is a folder here: a path
    ],
)
def test_hub_ids_and_paths_are_told_apart(name: str, hub: bool) -> None:
    from spiral.engines.loading import looks_like_hub_id

    assert looks_like_hub_id(name) is hub


def test_help_shows_what_the_parser_would_use(capsys: pytest.CaptureFixture[str]) -> None:
    """The keys given win over the recipe, wherever they stand."""
    argv = ["train", "lora_rank=8", "preset=embedded-tictactoe", "--help"]
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert "  lora_rank (set: 8; an integer)" in text
    assert '  env_ids ("TicTacToe-v0"; ' in text
    assert "  prompt_style (set: brief; " in text  # the recipe's
    assert cli.main([*argv, "all"]) == 0
    assert "  balanced_chance (False; " in capsys.readouterr().out  # only embedded-kuhn sets it


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["export", "checkpoint=", "out=/tmp/x"], "checkpoint= is empty"),
        (["export", "checkpoint=runs/a", "out= "], "out= is empty"),
        (["eval", "checkpoint=base", "temperature=-1"], "temperature must be >= 0"),
        (["eval", "checkpoint=base", "max_tokens=0"], "max_tokens must be > 0"),
        (["seeds", "seeds=0", "out=/nonexistent/s", "batch_siz=8"], "unknown key 'batch_siz'"),
    ],
)
def test_other_commands_refuse_in_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
