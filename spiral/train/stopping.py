"""Stopping a run cleanly on Ctrl-C (SIGINT), SIGTERM (what `kill` and schedulers send) or
SIGHUP (the terminal closed: the console goes on in `RUN/console.log` alone).

The first signal asks the loop to stop at the next step boundary: the step in flight is
FINISHED (its update, baselines and metrics belong together), then a checkpoint of that
consistent moment is written and the run exits. A second Ctrl-C abandons the step at once
(KeyboardInterrupt, no checkpoint): resume restarts from the last complete checkpoint, and
the abandoned step is replayed exactly from its derived seeds. Saving mid-step, as the
loop once did, wrote weights after step s under the label "next step = s".

A run started by another Spiral process (`spiral seeds`, through `Forwarded`) stops the
same way. That process passes on every SIGINT, SIGTERM and SIGHUP it receives and waits
for the run to end; the run sits in a session of its own, so a terminal's Ctrl-C or
hang-up reaches it once, through the parent, not twice. Should the parent die without a
word (SIGKILL), the run is sent SIGTERM (`stop_with_parent`) and stops as above instead
of training on alone and holding its folder.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType, TracebackType
from typing import Any, Self

PARENT_ENV = "SPIRAL_STOP_WITH_PARENT"  # the PID of the process a run stops with
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class _Caught:
    """Within `with`, SIGINT, SIGTERM and SIGHUP go to `self._handle`. Handlers are
    installed only in the main thread (signals reach no other); the previous ones come
    back on exit."""

    SIGNALS = tuple(
        getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
    )
    _previous: dict[int, Any]

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


class StopRequest(_Caught):
    """Install with `with StopRequest(log) as stop:`; `stop.requested` turns true on the
    first SIGINT/SIGTERM/SIGHUP."""

    def __init__(self, log: Callable[[str], None] = print) -> None:
        self.log = log
        self.signal_name = ""
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return bool(self.signal_name)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C: abandon the step now
        self.signal_name = signal.Signals(signum).name
        try:
            self.log(
                f"\n{self.signal_name}: finishing this step, then saving a checkpoint "
                "(Ctrl-C again to stop at once and lose the step in flight)"
            )
            sys.stdout.flush()
        except (OSError, ValueError):
            pass  # no terminal to tell (SIGHUP): the step and the save matter, not the line


class Forwarded(_Caught):
    """The signals of a process that runs others one at a time (`spiral seeds`). Within
    `with Forwarded() as stop:`, SIGINT, SIGTERM and SIGHUP are recorded, not acted on;
    `stop.run(argv)` passes each one on to the process it runs, as it comes, and returns
    once that process has ended, so a caller checks `stop.signal_name` and ends too."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.received[0]).name if self.received else ""

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)  # passed on by `run`, in the main flow

    def run(self, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        """`argv` to its end, every signal received meanwhile passed on to it (within a
        tenth of a second). It runs in a session of its own, told to stop with this
        process (`stop_with_parent`: with the thread that starts it, so call this from
        the main thread). Should this wait fail, the process is stopped as on SIGTERM
        before the error goes on."""
        env = {**os.environ, PARENT_ENV: str(os.getpid())}
        child = subprocess.Popen(list(argv), env=env, start_new_session=True)
        passed = 0
        try:
            while child.poll() is None:
                while passed < len(self.received):
                    with contextlib.suppress(ProcessLookupError):
                        child.send_signal(self.received[passed])
                    passed += 1
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=0.1)
        except BaseException:
            child.terminate()
            child.wait()
            raise
        return child


def stop_with_parent() -> None:
    """In a run that `Forwarded.run` started (PARENT_ENV names the parent): SIGTERM to this
    process when the parent dies, however it dies. On Linux the kernel sends it
    (PR_SET_PDEATHSIG); elsewhere a thread watches for the parent's end. A parent gone
    before the watch began is caught by the check after it."""
    named = os.environ.pop(PARENT_ENV, "")
    if not named.isdigit():
        return
    parent = int(named)
    if not _parent_death_signal(signal.SIGTERM):
        watch = threading.Thread(target=_watch_parent, args=(parent,), daemon=True)
        watch.start()
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def _parent_death_signal(signum: int) -> bool:
    """Ask the kernel for `signum` when the parent ends; False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    zero = ctypes.c_ulong(0)
    return int(prctl(ctypes.c_int(PR_SET_PDEATHSIG), ctypes.c_ulong(signum), zero, zero, zero)) == 0


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGTERM)
