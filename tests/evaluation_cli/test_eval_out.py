"""`spiral eval` checks where it will write before it evaluates: an `out=` it cannot write
is refused in one line before any game is played (not a traceback after them all, the
results lost), and the check leaves nothing behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spiral.cli import main as cli_main

from . import write_checkpoint

ARGS = ["env_ids=KuhnPokerSingle-v0", "opponents=random", "games=1", "max_tokens=4"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("run"), step=2)


@pytest.fixture
def no_games(monkeypatch: pytest.MonkeyPatch) -> None:
    """Playing a game fails the test: every refusal must come before the evaluation."""

    def evaluate(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the evaluation ran before the output was checked")

    monkeypatch.setattr("spiral.evaluation.cli.evaluate_candidate", evaluate)
    monkeypatch.setattr("spiral.evaluation.compare.evaluate_candidate", evaluate)


def _one_line_refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("spiral eval: cannot write ")
    return err


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.usefixtures("no_games")
def test_an_out_that_is_a_folder_is_refused_before_the_games(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _one_line_refusal(["eval", f"checkpoint={checkpoint}", *ARGS, f"out={tmp_path}"], capsys)
    assert "is a folder" in err and _listing(tmp_path) == []


@pytest.mark.usefixtures("no_games")
def test_an_out_in_a_read_only_folder_is_refused_before_the_games(
    checkpoint: Path, read_only_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = sorted(p.name for p in read_only_folder.iterdir())
    out = read_only_folder / "report.json"
    err = _one_line_refusal(["eval", f"checkpoint={checkpoint}", *ARGS, f"out={out}"], capsys)
    assert "takes no new files" in err
    assert sorted(p.name for p in read_only_folder.iterdir()) == before


@pytest.mark.usefixtures("no_games")
@pytest.mark.parametrize("where", ["under a file", "name too long"])
def test_an_out_that_cannot_be_made_is_refused_before_the_games(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "r.json" if where == "under a file" else tmp_path / ("x" * 300)
    err = _one_line_refusal(["eval", f"checkpoint={checkpoint}", *ARGS, f"out={out}"], capsys)
    assert ("is a file, not a folder" if where == "under a file" else "shorter name") in err
    assert _listing(tmp_path) == ["file"]


@pytest.mark.usefixtures("no_games")
def test_the_default_place_is_checked_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No out=: the report goes to RUN/eval/, here a file in the way."""
    (tmp_path / "run").mkdir()
    folder = write_checkpoint(tmp_path / "run", step=2)
    (tmp_path / "run" / "eval").write_text("in the way")
    err = _one_line_refusal(["eval", f"checkpoint={folder}", *ARGS], capsys)
    assert "eval is a file, not a folder" in err


@pytest.mark.usefixtures("no_games")
@pytest.mark.parametrize("league", [False, True])
def test_a_run_comparison_refuses_an_out_folder_it_cannot_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], league: bool
) -> None:
    (tmp_path / "run").mkdir()
    write_checkpoint(tmp_path / "run", step=2)
    (tmp_path / "taken").write_text("a file")
    argv = ["eval", f"run={tmp_path / 'run'}", *ARGS, f"out={tmp_path / 'taken'}"]
    err = _one_line_refusal(argv + (["league=true"] if league else []), capsys)
    assert "is a file, not a folder" in err


def test_an_out_in_folders_still_to_be_made_is_written(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "new" / "deeper" / "report.json"
    assert cli_main(["eval", f"checkpoint={checkpoint}", *ARGS, f"out={out}"]) == 0
    assert out.is_file() and _listing(tmp_path) == ["new", "new/deeper", "new/deeper/report.json"]


def test_a_device_that_refuses_the_write_is_one_line_after_the_printed_results(
    checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this machine")
    capsys.readouterr()
    assert cli_main(["eval", f"checkpoint={checkpoint}", *ARGS, "out=/dev/full"]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "cannot write the results to /dev/full" in err and "printed above" in err
    assert "random" in out  # the results table, printed before the write
