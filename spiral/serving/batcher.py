"""Requests that arrive together are sampled together: `spiral serve`'s one model thread.

The torch sampler already draws a batch of rows in one call (one prefill, one decode
step per token for all rows), so eight clients asking at once cost about one request's
time, not eight. `Batcher` owns the only thread that calls the sampler. Handlers
`submit` a tokenised, validated prompt and wait on the returned future; the thread takes
every request waiting, groups those that can share a call, and samples the group holding
the oldest request (the others wait for the next call, oldest first, so nobody starves).

Which requests share a call: those with the same sampling parameters (`max_tokens`,
temperature, top-p, stop strings), since a sampler call draws every row under one
`SamplingParams`. A request with a `seed` is sampled alone, so that its reply does not
depend on what else was asked at the time. Each row keeps its own answer constraint
(`guided_choice`). At most `max_rows` rows share a call.

Cancelling: each request carries its own flag (a client that left, a time limit, a
shutdown). The call's flag is set only once every request in it is cancelled, so one
client leaving does not take the others' answers with it; a request cancelled while it
still waits is dropped before any sampling.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import threading
import time
from collections.abc import Sequence
from typing import Any

from spiral.engines.base import CancelFlag, Sampler, SamplingCancelled, SamplingParams
from spiral.types import AnswerConstraint

MAX_ROWS = 16  # rows in one sampler call


@dataclasses.dataclass
class Job:
    """One request's prompt, as the sampler takes it, and where its completion goes."""

    prompt_ids: list[int]
    params: SamplingParams
    constraint: AnswerConstraint | None
    future: concurrent.futures.Future[Any] = dataclasses.field(
        default_factory=concurrent.futures.Future
    )

    def cancelled(self) -> bool:
        return self.params.cancel is not None and self.params.cancel.is_set()


def share_key(params: SamplingParams) -> tuple[Any, ...] | None:
    """What requests must agree on to share a sampler call; None: sampled alone."""
    if params.seed is not None:
        return None
    return (params.max_tokens, params.temperature, params.top_p, params.stop)


class AllCancelled:
    """The call's cancel flag: set once every request's own flag is set."""

    def __init__(self, flags: Sequence[CancelFlag | None]) -> None:
        self.flags = list(flags)

    def is_set(self) -> bool:
        return all(flag is not None and flag.is_set() for flag in self.flags)

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True


class Batcher:
    """The thread that samples for every request, batching those that arrive together."""

    def __init__(self, sampler: Sampler, max_rows: int = MAX_ROWS) -> None:
        self.sampler, self.max_rows = sampler, max_rows
        self._waiting: list[Job] = []
        self._ready = threading.Condition()
        self._closed = False
        self.calls = 0  # sampler calls made (for tests and the load benchmark)
        threading.Thread(target=self._run, name="spiral-serve-sampler", daemon=True).start()

    def submit(
        self, prompt_ids: list[int], params: SamplingParams, constraint: AnswerConstraint | None
    ) -> concurrent.futures.Future[Any]:
        """Queue one prompt; the future gets its Completion (or SamplingCancelled)."""
        job = Job(prompt_ids, params, constraint)
        with self._ready:
            self._waiting.append(job)
            self._ready.notify()
        return job.future

    def close(self) -> None:
        """End the thread once the queue is empty (the server is stopping)."""
        with self._ready:
            self._closed = True
            self._ready.notify()

    def _next_call(self) -> list[Job] | None:
        """Block until a request waits; take the oldest and those that can join it
        (None: closed and nothing left)."""
        with self._ready:
            while not self._waiting:
                if self._closed:
                    return None
                self._ready.wait()
            oldest = self._waiting[0]
            key = share_key(oldest.params)
            take = [oldest]
            if key is not None:
                same = [j for j in self._waiting[1:] if share_key(j.params) == key]
                take += same[: self.max_rows - 1]
            taken = set(map(id, take))
            self._waiting = [j for j in self._waiting if id(j) not in taken]
        return take

    def _run(self) -> None:
        while (jobs := self._next_call()) is not None:
            live = []
            for job in jobs:
                if job.cancelled():  # the client left (or timed out) while it waited
                    _settle(job, error=SamplingCancelled("cancelled before sampling"))
                else:
                    live.append(job)
            if live:
                self._sample(live)

    def _sample(self, jobs: list[Job]) -> None:
        flags = [job.params.cancel for job in jobs]
        cancel = flags[0] if len(jobs) == 1 else AllCancelled(flags)
        params = dataclasses.replace(jobs[0].params, cancel=cancel)
        self.calls += 1
        try:
            completions = self.sampler.sample(
                [job.prompt_ids for job in jobs], params, [job.constraint for job in jobs]
            )
        except BaseException as err:  # handed to every waiting request, the thread goes on
            for job in jobs:
                _settle(job, error=err)
            return
        for job, completion in zip(jobs, completions, strict=True):
            _settle(job, result=completion)


def _settle(job: Job, result: Any = None, error: BaseException | None = None) -> None:
    """Hand a request its outcome, unless its handler has stopped waiting for it."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(result)
