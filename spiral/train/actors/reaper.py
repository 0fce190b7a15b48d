"""A watchdog that takes down the Ray processes a training process started, however that
process ends (SIGKILL and the OOM killer included).

`ray.init()` starts a local Ray instance (GCS, raylet, agents, workers) as descendants of
the driver. A clean exit shuts it down (`ray.shutdown()`), and Ray fate-shares its GCS and
raylet with the driver, but when the driver is killed outright Ray's dashboard and
runtime-env agents are left running, adopted by init (measured with Ray 2.60). The reaper
is a small separate process: it notes the driver's Ray descendants every half second
and, when its pipe from the driver closes without a goodbye (the driver is gone), it
terminates the ones still alive (SIGTERM, then SIGKILL). A goodbye comes after
`ray.shutdown()`; what is still alive SHUTDOWN_GRACE_S later is terminated too (a
shutdown after the GCS died leaves the agents running: measured 30-60 s). Only processes that were the
driver's descendants and look like Ray's (`ray::`, raylet, gcs_server, Ray's package
folder in the command line) are touched, each checked by its start time so that a reused pid is never hit.
Linux only (/proc); elsewhere `start` returns None and nothing watches.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

_MARKERS = ("ray::", "raylet", "gcs_server", "/ray/")
GOODBYE = b"bye\n"
SHUTDOWN_GRACE_S = 2.0  # after ray.shutdown(), how long its processes get to end by themselves


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of `pid`, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[19])


def _cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def ray_descendants(root: int) -> dict[int, int]:
    """{pid: start time} of `root`'s descendants that look like Ray processes."""
    parents: dict[int, int] = {}
    starts: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (found := _stat(int(entry))) is not None:
            parents[int(entry)], starts[int(entry)] = found
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    out, stack = {}, list(children.get(root, []))
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        if any(marker in _cmdline(pid) for marker in _MARKERS):
            out[pid] = starts[pid]
    return out


def alive(noted: dict[int, int]) -> list[int]:
    """The noted processes still running: same pid and same start time (never a reused pid)."""
    return [pid for pid, start in noted.items() if (s := _stat(pid)) is not None and s[1] == start]


def terminate(noted: dict[int, int], grace_s: float = 3.0) -> None:
    """SIGTERM the noted processes still alive, SIGKILL what is left after `grace_s`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive(noted):
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while alive(noted) and time.monotonic() < deadline:
            time.sleep(0.1)


def watch(driver: int, pipe: int, interval_s: float = 0.5) -> None:
    """The reaper's loop: note the driver's Ray processes until the pipe closes."""
    noted: dict[int, int] = {}
    while True:
        for pid, start in ray_descendants(driver).items():
            noted[pid] = start
        ready, _, _ = select.select([pipe], [], [], interval_s)
        if ready:
            data = os.read(pipe, 64)
            if data == GOODBYE:  # Ray was shut down: whatever it left behind goes now
                _wait_gone(noted, SHUTDOWN_GRACE_S)
                terminate(noted)
                return
            if not data:  # the driver is gone without a word
                terminate(noted)
                return


def _wait_gone(noted: dict[int, int], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while alive(noted) and time.monotonic() < deadline:
        time.sleep(0.1)


class Reaper:
    """The driver's end: `start()` launches the watchdog, `stop()` says goodbye."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Reaper:
        if sys.platform.startswith("linux"):
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "spiral.train.actors.reaper", str(os.getpid())],
                stdin=subprocess.PIPE,
                start_new_session=True,  # a Ctrl-C to the terminal does not reach it
            )
        return self

    def stop(self) -> None:
        if self.proc is None or self.proc.stdin is None:
            return
        try:
            self.proc.stdin.write(GOODBYE)
            self.proc.stdin.close()
        except OSError:
            pass
        with contextlib.suppress(subprocess.TimeoutExpired):  # it finishes on its own
            self.proc.wait(timeout=15)
        self.proc = None


if __name__ == "__main__":
    watch(int(sys.argv[1]), sys.stdin.fileno())
