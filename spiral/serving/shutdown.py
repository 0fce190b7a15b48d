"""How `spiral serve` stops: on SIGTERM, SIGHUP or SIGINT (Ctrl-C) uvicorn stops accepting,
the requests in flight see `app.state.stopping` (flight.py), finish or are cancelled
after FINISH_ON_SHUTDOWN_S and answered 503 (a stream: an error event), and the process
ends by the signal. uvicorn itself drains on SIGINT and SIGTERM only; a hang-up (the
terminal or ssh session closing) killed the process with its requests in flight, so it
is caught here too, unless it is ignored (nohup)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI

GRACEFUL_SHUTDOWN_S = 2  # how long uvicorn waits for the requests in flight after a signal
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # each drains the same way


def run_server(app: FastAPI, host: str, port: int) -> None:
    """Serve until SIGTERM, SIGHUP or Ctrl-C: uvicorn then stops accepting; the requests
    in flight see `app.state.stopping`, finish or are cancelled after
    FINISH_ON_SHUTDOWN_S and answered 503 (a stream: an error event), and the process
    ends by the signal (Ctrl-C: KeyboardInterrupt, which the `spiral` command reports as
    "interrupted")."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            app.state.stopping.begin()
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # the stop signals uvicorn leaves alone drain the same way, then end the
            # process as they would have (not where one is ignored: nohup)
            received: list[int] = []

            def on_extra(sig: int, frame: Any) -> None:
                received.append(sig)
                self.handle_exit(sig, frame)

            extra = [sig for sig in STOP_SIGNALS if sig not in uvicorn.server.HANDLED_SIGNALS]
            if threading.current_thread() is not threading.main_thread():
                extra = []
            extra = [sig for sig in extra if signal.getsignal(sig) is not signal.SIG_IGN]
            before = {sig: signal.signal(sig, on_extra) for sig in extra}
            try:
                with super().capture_signals():
                    yield
            finally:
                for sig, handler in before.items():
                    signal.signal(sig, handler)
                for got in received[:1]:
                    signal.raise_signal(got)

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    Server(config).run()
