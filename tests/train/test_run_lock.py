"""One run folder, one run: a second process is refused with the holder named and its
unfinished writes left alone; a lock left by a killed process is taken over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from spiral.cli import main as cli_main
from spiral.train.run_lock import RunFolderBusy, run_lock

HOLD = """
import sys, time
from pathlib import Path
from spiral.train.run_lock import run_lock
with run_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(120)
"""


def _holder(run: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_run_on_the_folder_is_refused_and_touches_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    holder = _holder(run)
    try:
        partial = run / "checkpoints" / ".tmp-step_000002-999"  # the holder's write
        partial.mkdir(parents=True)
        argv = ["train", "env_ids=KuhnPokerSingle-v0", "max_steps=1", f"log_path={run}"]
        assert cli_main(argv) == 2
        err = capsys.readouterr().err
        assert f"process {holder.pid}" in err and "another log_path=" in err
        assert len(err.strip().splitlines()) == 1
        assert partial.is_dir()  # the other process's write in progress survives
        with pytest.raises(RunFolderBusy), run_lock(run):
            pass
    finally:
        holder.kill()
        holder.wait()


def _files(run: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(run)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in run.rglob("*")
        if p.is_file()
    }


def test_a_refused_run_writes_nothing_into_the_running_runs_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The refusal comes before the console is kept: the running run's console.log gets
    no header, no "run folder:" line and no error line of the process it refused."""
    run = tmp_path / "run"
    holder = _holder(run)
    try:
        (run / "console.log").write_text("the running run's console\n", encoding="utf-8")
        before = _files(run)
        argv = ["train", "env_ids=KuhnPokerSingle-v0", "max_steps=1", f"log_path={run}"]
        assert cli_main(argv) == 2
        err = capsys.readouterr().err
        assert "in use by" in err and len(err.strip().splitlines()) == 1
        assert _files(run) == before
        assert (run / "console.log").read_text() == "the running run's console\n"
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_is_taken_once_per_process(tmp_path: Path) -> None:
    """`spiral train` holds the folder from before its console is kept; the loop's own
    `run_lock` inside it is the same hold, not a second one refused by the first."""
    with run_lock(tmp_path / "run"):
        with run_lock(tmp_path / "run"):
            pass
        other = subprocess.run(  # still held: the inner block released nothing
            [sys.executable, "-c", HOLD, str(tmp_path / "run")], capture_output=True, text=True
        )
        assert other.returncode != 0 and "RunFolderBusy" in other.stderr


def test_a_lock_left_by_a_killed_run_is_taken_over(tmp_path: Path) -> None:
    run = tmp_path / "run"
    holder = _holder(run)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert str(holder.pid) in (run / ".lock").read_text()  # the dead holder's note
    with run_lock(run):  # never blocks: the lock died with its process
        assert f"process {os.getpid()}" in (run / ".lock").read_text()
