"""Stopping a run cleanly on Ctrl-C (SIGINT), SIGTERM (what `kill` and schedulers send) or
SIGHUP (the terminal closed: the console goes on in `RUN/console.log` alone).

The first signal asks the loop to stop at the next step boundary: the step in flight is
FINISHED (its update, baselines and metrics belong together), then a checkpoint of that
consistent moment is written and the run exits. A second Ctrl-C abandons the step at once
(KeyboardInterrupt, no checkpoint): resume restarts from the last complete checkpoint, and
the abandoned step is replayed exactly from its derived seeds. Saving mid-step, as the
loop once did, wrote weights after step s under the label "next step = s".
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any


class StopRequest:
    """Install with `with StopRequest(log) as stop:`; `stop.requested` turns true on the
    first SIGINT/SIGTERM/SIGHUP. Handlers are installed only in the main thread (signals
    reach no other) and the previous ones come back on exit."""

    SIGNALS = tuple(
        getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
    )

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

    def __enter__(self) -> StopRequest:
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
