"""Progress that reaches a log file: one flushed line per step and per evaluation, so
`make train > log.txt` shows each line while the run goes on."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from spiral.report.console import format_eval


def test_eval_line_shows_the_headline_numbers() -> None:
    line = format_eval(
        10,
        {
            "eval/KuhnPokerSingle-v0/random/seat0/win_rate": 0.6,
            "eval/KuhnPokerSingle-v0/random/seat1/win_rate": 0.4,
            "eval/KuhnPokerSingle-v0/exploitability_t1": 0.113,
            "eval/KuhnPokerSingle-v0/averaged/exploitability_t1": 0.25,
            "eval/KuhnPokerSingle-v0/pool_average/exploitability_t1": 0.2,
            "time/eval": 4.12,
        },
    )
    assert line == (
        "eval @ step 10 | win@random 0.50 | exploitability 0.113 | averaged 0.250 | "
        "pool average 0.200 | 4.1s"
    )


def test_lines_reach_a_redirected_stdout_while_the_run_goes_on(tmp_path: Path) -> None:
    from spiral.testing import make_tiny_model

    model = make_tiny_model(tmp_path / "model")
    log = tmp_path / "log.txt"
    args = [
        f"model_name={model}", "env_ids=TicTacToe-v0", "batch_size=4", "max_steps=200",
        "max_tokens=4", "lora_rank=4", "eval_every=1", "eval_games=1", "save_every=0",
        f"log_path={tmp_path / 'run'}",
    ]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "spiral.cli", "train", *args],
            stdout=out,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and "step 2/200" not in log.read_text():
                time.sleep(0.2)
            text = log.read_text()
        finally:
            proc.kill()
            proc.wait(timeout=30)
    # Seen before the process ended (it was killed mid-run): not held in a buffer.
    assert "step 1/200" in text and "step 2/200" in text, text[-2000:]
    assert "eval @ step 0" in text and "eval @ step 1" in text


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_the_console_log_outlives_its_block_and_a_closed_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from spiral.report.console_log import kept_in

    log = tmp_path / "console.log"
    with kept_in(log):
        print("inside")
        kept = sys.stderr  # what a logging handler made inside the block holds on to
    kept.write("after the block\n")  # the file is closed: the terminal still gets it
    assert "after the block" in capsys.readouterr().err
    assert "inside" in log.read_text() and "after the block" not in log.read_text()
    monkeypatch.setattr(sys, "stdout", None)  # started with stdout closed (`>&-`)
    with kept_in(log):
        print("to the log only")
    assert "to the log only" in log.read_text()


def test_a_terminal_that_goes_away_leaves_the_log_going(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After SIGHUP the terminal is gone and writing to it raises (EIO): the run's
    console keeps going into console.log, and nothing raises."""
    from spiral.report.console_log import kept_in

    class Gone:
        def write(self, text: str) -> int:
            raise OSError(5, "Input/output error")

        def flush(self) -> None:
            raise OSError(5, "Input/output error")

        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdout", Gone())
    log = tmp_path / "console.log"
    with kept_in(log):
        print("before")
        print("after the terminal closed")
        sys.stdout.flush()
        assert sys.stdout.isatty() is False  # the log file answers now
    text = log.read_text()
    assert "before" in text and "after the terminal closed" in text
