"""`spiral seeds` stopped from outside, through the real command on a tiny model: a
SIGINT, SIGTERM or SIGHUP at any moment reaches the running seed's `spiral train`, which
finishes its step and saves what it said it would; the sweep then exits with no process
left behind and the run folder free, and the same command finishes every seed. A sweep
killed outright (SIGKILL) takes its run with it: the run stops as on SIGTERM. A refused
attempt adds nothing to a seed's wall time.

The processes are found by their command lines, which name the test's own folder
(/proc: Linux)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from spiral.report.sinks import read_jsonl
from spiral.train.checkpoint import latest_checkpoint, load_loop_state
from spiral.train.run_lock import run_lock

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

STEPS = 3
PROMISE = "finishing this step, then saving a checkpoint"
PATIENCE_S = 600  # a bound on waiting for a process, never a measurement


def _sweep(model: Path, out: Path, seeds: str = "0-1") -> list[str]:
    """A sweep of tiny runs whose steps (32 games) take longer than a blink, so that a
    run killed soon after a signal has not saved yet."""
    return [
        sys.executable, "-m", "spiral.cli", "seeds", f"seeds={seeds}", f"out={out}",
        f"model_name={model}", "env_ids=KuhnPokerSingle-v0", "template=chat",
        "answer_format=constrained", "max_tokens=4", "batch_size=64", f"max_steps={STEPS}",
        "lora_rank=4", "eval_every=0", "save_every=0", "metrics=train/*",
    ]  # fmt: skip


def _alive_naming(folder: Path) -> list[int]:
    """Live processes (not zombies) whose command line names `folder`."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            command = (proc / "cmdline").read_bytes()
            state = (proc / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if str(folder).encode() in command and state not in ("Z", "X"):
            pids.append(int(proc.name))
    return pids


def _wait_for(done, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + PATIENCE_S
    while not done():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


@contextmanager
def _started(argv: list[str], log: Path) -> Iterator[subprocess.Popen]:
    """The sweep in a process group of its own, as a shell starts a command (a terminal's
    Ctrl-C and hang-up reach the whole group), its output in `log`; whatever it left
    running is ended afterwards (found by the folder it names: a failing test leaves
    nothing behind)."""
    with log.open("w") as sink:
        sweep = subprocess.Popen(
            argv, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield sweep
    finally:
        if sweep.poll() is None:
            sweep.kill()
        sweep.wait()
        for pid in _alive_naming(log.parent):
            os.kill(pid, signal.SIGKILL)


def _assert_left_clean(out: Path, abandoned: bool = False) -> None:
    """No process of the sweep alive, every run folder free, and (unless a second Ctrl-C
    abandoned a step) every step a run finished is in a checkpoint it saved."""
    assert _alive_naming(out) == []
    for folder in sorted(p for p in out.glob("seed[0-9]*") if p.is_dir()):
        with run_lock(folder):  # refused (RunFolderBusy) while a run holds it
            pass
        metrics = folder / "metrics.jsonl"
        trained = len(read_jsonl(metrics)) if metrics.exists() else 0
        newest = latest_checkpoint(folder / "checkpoints")
        saved = load_loop_state(newest).step if newest is not None else 0
        assert abandoned or saved == trained, (folder, saved, trained)


def _assert_rerun_finishes(model: Path, out: Path) -> None:
    again = subprocess.run(_sweep(model, out), capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr
    rows = [json.loads(line) for line in (out / "seeds.jsonl").read_text().splitlines()]
    assert [r["seed"] for r in rows] == [0, 1] and all(r["wall_s"] > 0 for r in rows)
    for seed in (0, 1):
        run = out / f"seed{seed}"
        assert load_loop_state(latest_checkpoint(run / "checkpoints")).step == STEPS
        assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == list(range(STEPS))
    _assert_left_clean(out)


SIGNALS = st.sampled_from([signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
# Moments of a sweep, by the line that shows it: the sweep started, a run started (its
# model loading), a run's first step done, the second seed started, the last step done.
ANCHORS = st.sampled_from(
    ["seeds: seed 0", "run folder:", f"step 1/{STEPS}", "seeds: seed 1", f"step {STEPS}/{STEPS}"]
)


def _stop_and_rerun(
    model: Path, signum: int, anchor: str, delay_s: float, twice: bool, group: bool
) -> None:
    """The signal comes `delay_s` after the sweep's output shows `anchor` (the moment in
    the sweep, whatever this machine's speed); `group`: to the sweep's process group, as
    a terminal sends Ctrl-C and hang-up, else to `spiral seeds` alone, as `kill PID`
    does; `twice`: Ctrl-C again, a quarter of a second later."""
    twice = twice and signum == signal.SIGINT
    with tempfile.TemporaryDirectory() as tmp:
        out, log = Path(tmp) / "sweep", Path(tmp) / "sweep.log"
        with _started(_sweep(model, out), log) as sweep:
            _wait_for(lambda: anchor in log.read_text() or sweep.poll() is not None, anchor)
            for wait_s in (delay_s, 0.25)[: 1 + twice]:
                time.sleep(wait_s)
                if sweep.poll() is not None:
                    break
                if group:
                    os.killpg(sweep.pid, signum)
                else:
                    sweep.send_signal(signum)
            code = sweep.wait(timeout=PATIENCE_S)
        said = log.read_text()
        assert code in (0, 128 + signum, -signum), said
        assert "Traceback" not in said, said
        _assert_left_clean(out, abandoned=twice)
        _assert_rerun_finishes(model, out)


@pytest.mark.parametrize(
    ("signum", "group"),
    [(signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c in the terminal", "kill"],
)
def test_a_signal_mid_step_is_passed_on_and_the_step_saved(
    tiny_llama: Path, signum: int, group: bool
) -> None:
    """Ctrl-C once reached the run and the sweep, which killed the run 0.25 s later,
    before it saved; `kill` reached the sweep alone and its run trained on, holding
    the folder."""
    _stop_and_rerun(tiny_llama, signum, f"step 1/{STEPS}", 0.0, twice=False, group=group)


@pytest.mark.slow
@settings(
    max_examples=2,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],  # each example is two sweeps: no shrinking
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(signum=SIGNALS, anchor=ANCHORS, delay_s=st.floats(0, 3), twice=st.booleans(),
       group=st.booleans())  # fmt: skip
@example(signum=signal.SIGTERM, anchor="run folder:", delay_s=0.5, twice=False, group=False)
@example(signum=signal.SIGHUP, anchor="seeds: seed 1", delay_s=0.0, twice=False, group=True)
@example(signum=signal.SIGINT, anchor=f"step 1/{STEPS}", delay_s=0.2, twice=True, group=True)
@example(
    signum=signal.SIGTERM, anchor=f"step {STEPS}/{STEPS}", delay_s=0.0, twice=False, group=False
)
def test_a_signal_at_any_moment_leaves_no_process_and_the_rerun_finishes(
    tiny_llama: Path, signum: int, anchor: str, delay_s: float, twice: bool, group: bool
) -> None:
    """Any of the three signals at any moment of a sweep, to the sweep or its group, once
    or Ctrl-C twice: no process left, every folder free, every promised save made, and
    the same command finishes every seed (a few minutes: `make test-slow`)."""
    _stop_and_rerun(tiny_llama, signum, anchor, delay_s, twice, group)


def test_a_sweep_killed_outright_takes_its_run_with_it(tiny_llama: Path, tmp_path: Path) -> None:
    """SIGKILL cannot be caught or passed on: the run learns of it from the kernel (the
    parent-death signal) and stops as on SIGTERM: the step finished, a checkpoint saved,
    the folder freed."""
    out = tmp_path / "sweep"
    with _started(_sweep(tiny_llama, out), tmp_path / "sweep.log") as sweep:
        console = out / "seed0" / "console.log"
        _wait_for(lambda: console.exists() and f"step 1/{STEPS}" in console.read_text(), "a step")
        runs = [pid for pid in _alive_naming(out) if pid != sweep.pid]
        assert len(runs) == 1
        sweep.kill()
        sweep.wait()
        _wait_for(lambda: runs[0] not in _alive_naming(out), "the run to stop by itself")
    said = console.read_text()
    assert f"SIGTERM: {PROMISE}" in said
    assert "stopped by SIGTERM: saved" in said or "final checkpoint:" in said
    _assert_left_clean(out)
    _assert_rerun_finishes(tiny_llama, out)


HOLD = """
import sys, time
from pathlib import Path
from spiral.train.run_lock import run_lock
with run_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_refused_attempt_adds_nothing_to_the_wall_time(tiny_llama: Path, tmp_path: Path) -> None:
    """The wall-time column counts the attempts that trained: one refused because another
    process holds the run folder, or one that finds the run finished, adds nothing."""
    out = tmp_path / "sweep"
    done = subprocess.run(_sweep(tiny_llama, out, "0"), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    clock = out / "seed0" / "seeds_wall_s.json"
    trained = json.loads(clock.read_text())["wall_s"]
    assert trained > 0
    again = subprocess.run(_sweep(tiny_llama, out, "0"), capture_output=True, text=True)
    assert again.returncode == 0 and json.loads(clock.read_text())["wall_s"] == trained
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(out / "seed0")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        refused = subprocess.run(_sweep(tiny_llama, out, "0"), capture_output=True, text=True)
        assert refused.returncode == 2 and "in use by" in refused.stderr
        assert json.loads(clock.read_text())["wall_s"] == trained
    finally:
        holder.kill()
        holder.wait()
