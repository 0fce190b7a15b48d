"""One request in flight in `spiral serve`, seen from its handler: the future the model
thread settles, the tokens it reports as it draws them (for a streamed reply), and the
watch that cancels the request when its client leaves, its time limit passes or a
shutdown's grace ends.

The model thread runs outside the event loop: it reports tokens through
`call_soon_threadsafe`, keeping only the newest tuple (a handler that falls behind
reads the latest tokens, not every step). Cancelling sets the request's own flag; the
model thread drops the request if it still waits, or its row before the next token
(batcher.py, continuous.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

from spiral.engines.base import SamplingParams
from spiral.types import AnswerConstraint

DISCONNECT_POLL_S = 0.1  # how often a running request checks its client is still there
FINISH_ON_SHUTDOWN_S = 1.0  # after a stop signal, how long a request may run before its 503


class Stopping:
    """When the server was told to stop (SIGTERM, SIGHUP, Ctrl-C), for the requests in
    flight."""

    def __init__(self) -> None:
        self.since: float | None = None

    def begin(self) -> None:
        if self.since is None:
            self.since = time.monotonic()

    def overdue(self) -> bool:
        return self.since is not None and time.monotonic() - self.since > FINISH_ON_SHUTDOWN_S


class Flight:
    """A submitted request: `work` (its Completion), `latest` (its tokens so far, when
    `stream`), and `watch` (one wait of at most DISCONNECT_POLL_S, then the checks)."""

    def __init__(
        self,
        batcher: Any,
        prepared: tuple[list[int], SamplingParams, AnswerConstraint | None],
        stopping: Stopping,
        deadline: float,
        stream: bool = False,
    ) -> None:
        prompt_ids, self.params, self.constraint = prepared
        assert isinstance(self.params.cancel, threading.Event)
        self.cancel = self.params.cancel
        self.prompt_tokens = len(prompt_ids)
        self.stopping, self.deadline = stopping, deadline
        self.latest: tuple[int, ...] = ()
        self._loop = asyncio.get_running_loop()
        self._news = asyncio.Event()
        progress = self._progress if stream else None
        future = batcher.submit(prompt_ids, self.params, self.constraint, progress=progress)
        self.work: asyncio.Future[Any] = asyncio.wrap_future(future)

    def _progress(self, tokens: tuple[int, ...]) -> None:
        """Called in the model's thread with the reply's tokens so far."""
        self.latest = tokens
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody listens any more
            self._loop.call_soon_threadsafe(self._news.set)

    async def watch(self, request: Any = None) -> bool:
        """Wait until the reply is done, new tokens came (streamed) or DISCONNECT_POLL_S
        passed; then cancel the request if its client left (`request`, when given), a
        shutdown's grace ended or its time is up. False: its time is up (it is dropped,
        its outcome read and ignored)."""
        news = asyncio.ensure_future(self._news.wait())
        try:
            await asyncio.wait({self.work, news}, timeout=DISCONNECT_POLL_S,
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        finally:
            news.cancel()
        self._news.clear()
        if self.work.done():
            return True
        if time.monotonic() > self.deadline:
            self.drop()
            return False
        if self.stopping.overdue() or (request is not None and await request.is_disconnected()):
            self.cancel.set()
        return True

    def drop(self) -> None:
        """Cancel the request and stop caring how it ends."""
        self.cancel.set()
        self.work.add_done_callback(_retrieved)


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Read a dropped request's outcome, so that asyncio does not log it as unread."""
    if not future.cancelled():
        future.exception()
