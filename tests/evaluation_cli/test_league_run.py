"""`spiral eval run=DIR league=true`: a round-robin between tiny-model checkpoints, rated."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import pytest

from spiral.cli import main as cli_main
from spiral.evaluation.cli import main
from spiral.evaluation.league import from_json

from . import write_checkpoint

NAMES = ("ckpt:step_000002", "ckpt:step_000004", "ckpt:step_000006")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("league-run")
    for seed, step in enumerate((2, 4, 6), start=1):
        write_checkpoint(run, step=step, seed=seed)
    return run


def test_league_round_robin(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        f"run={run_dir}",
        "league=true",
        "games=2",
        "seed=1",
        "max_tokens=4",
        "answer_format=constrained",  # every move legal: real wins and losses
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    stem = "league_TicTacToe-v0_seed1"  # the run's games, inherited
    assert "| name | mu | sigma | ordinal" in printed and f"{stem}.json" in printed
    out_dir = run_dir / "eval"
    data = json.loads((out_dir / f"{stem}.json").read_text())
    league = from_json(data)
    assert sorted(league.ratings) == sorted(NAMES)
    assert sorted(league.head_to_head) == sorted(combinations(NAMES, 2))
    for pair, counts in league.head_to_head.items():
        assert sum(counts) == 2 * 2, pair  # games x both seat orders
    for name in NAMES:
        assert data["ratings"][name]["games"] == 2 * 2 * 2  # two opponents
    markdown = (out_dir / f"{stem}.md").read_text()
    assert data["table"] in markdown and "row vs column" in markdown
    assert not list(out_dir.glob("compare*"))  # the league replaces the comparison


def test_league_honours_every(run_dir: Path, tmp_path: Path) -> None:
    args = [
        f"run={run_dir}",
        "league=true",
        "games=1",
        "every=2",
        "max_tokens=2",
        f"out={tmp_path}",
    ]
    assert main(args) == 0
    league = from_json(json.loads((tmp_path / "league_TicTacToe-v0_seed0.json").read_text()))
    assert sorted(league.ratings) == [NAMES[0], NAMES[2]]  # step 0 of the list and the newest
    assert sum(league.head_to_head[(NAMES[0], NAMES[2])]) == 2


def test_league_needs_a_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["eval", "checkpoint=base", "league=true"]) == 2
    assert "league=true rates a run's checkpoints" in capsys.readouterr().err
    assert main(["--help"]) == 0
    assert "  league (False; " in capsys.readouterr().out
