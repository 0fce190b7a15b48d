"""`spiral report run=PATH` on a real run folder; the console progress line."""

from __future__ import annotations

from pathlib import Path

import pytest

from spiral.cli import main as cli_main
from spiral.report.console import format_duration, format_progress
from spiral.report.run_report import main
from spiral.report.sinks import JsonlSink

WIN = "eval/TicTacToe-v0/random/seat0/win_rate"
INVALID = "train/TicTacToe-v0/seat0/invalid_rate"


def _make_run(folder: Path) -> Path:
    sink = JsonlSink(folder / "metrics.jsonl")
    for step in range(1, 7):
        metrics = {INVALID: 0.6 / step, "time/sample": 1.0, "train/loss": 0.1}
        if step % 3 == 0:  # evaluated at steps 3 and 6
            metrics[WIN] = 0.4 + 0.1 * step
        sink.log(metrics, step=step)
    sink.close()
    return folder


def test_report_writes_plots_and_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _make_run(tmp_path / "run")
    assert main([f"run={run}"]) == 0
    report = run / "report"
    assert (report / "invalid_rate.png").stat().st_size > 5_000
    assert (report / "win_rate_vs_random.png").stat().st_size > 5_000
    summary = (report / "summary.md").read_text(encoding="utf-8")
    out = capsys.readouterr().out
    assert out.startswith(summary) and "HTML report:" in out
    assert (report / "index.html").is_file()
    assert "- rows: 6, steps 1 to 6" in summary
    # First and last with their steps: 0.6 -> 0.1 and 0.7 (step 3) -> 1.0 (step 6).
    assert f"| `{INVALID}` | 0.6 (step 1) | 0.1 (step 6) | -0.5 |" in summary
    assert f"| `{WIN}` | 0.7 (step 3) | 1 (step 6) | +0.3 |" in summary
    assert "![invalid_rate](invalid_rate.png)" in summary
    assert "time/sample" not in summary  # not a key metric


def test_report_through_the_cli_with_out(tmp_path: Path) -> None:
    run = _make_run(tmp_path / "run")
    assert cli_main(["report", f"run={run}", f"out={tmp_path / 'elsewhere'}"]) == 0
    assert (tmp_path / "elsewhere" / "summary.md").is_file()
    assert not (run / "report").exists()


def test_missing_metrics_and_bad_args(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["report", f"run={tmp_path}"]) == 2
    assert "no metrics.jsonl in" in capsys.readouterr().err
    assert cli_main(["report"]) == 2
    assert "run= is required" in capsys.readouterr().err
    assert cli_main(["report", "run"]) == 2
    assert "is not key=value" in capsys.readouterr().err
    assert main(["--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: spiral report run=PATH")


def test_format_progress() -> None:
    metrics = {
        "train/overall/invalid_rate": 0.125,
        "eval/TicTacToe-v0/random/seat0/win_rate": 0.5,
        "eval/TicTacToe-v0/random/seat1/win_rate": 0.7,
        "train/assemble/std_advantage": 0.5,  # as the loop namespaces it
        "time/sample": 4.12,
        "time/train": 2.0,
        "unrelated/key": 3.0,
    }
    line = format_progress(10, 40, metrics, elapsed_s=50.0)
    # 5 s per step, 30 steps left -> 150 s.
    assert line == (
        "step 10/40 (25%) | invalid 0.125 | win@random 0.60 | adv_std 0.500"
        " | sample 4.1s train 2.0s"
        " | 5.0s/step | ETA 2m30s"
    )
    assert format_progress(0, 40, {}, elapsed_s=3.0) == "step 0/40 (0%) | elapsed 3s"
    # Resumed at step 30: 5 steps in 50 s here -> 10 s per step, 5 left -> 50 s.
    assert format_progress(35, 40, {}, elapsed_s=50.0, first=30).endswith("10.0s/step | ETA 50s")
    assert "\n" not in line
    floored = format_progress(
        10, 40, {"train/approx_kl": 0.002, "train/move_floor_deficit": 0.0217}, 5.0
    )
    assert "| kl 0.0020 | floor 0.0217 |" in floored  # shown only where the floor is logged
    magnet = format_progress(10, 40, {"train/approx_kl": 0.0, "train/kl_to_magnet": 0.31}, 5.0)
    assert "| kl 0.0000 | kl_magnet 0.3100 |" in magnet  # the magnet's KL is its own


def test_format_duration() -> None:
    assert format_duration(45) == "45s"
    assert format_duration(185) == "3m05s"
    assert format_duration(2 * 3600 + 3 * 60 + 10) == "2h03m"
    assert format_duration(-5) == "0s"
