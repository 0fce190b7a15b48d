"""Requests that arrive together are sampled together: `spiral serve`'s one model thread.

The torch sampler already draws a batch of rows in one call (one prefill, one decode
step per token for all rows), so eight clients asking at once cost about one request's
time, not eight. `Batcher` owns the only thread that calls the sampler. Handlers
`submit` a tokenised, validated prompt and wait on the returned future; the thread takes
every request waiting, groups those that can share a call, and samples the group of the
request with the fewest tokens left to draw (a short request is not kept behind long
ones), unless one has waited MAX_WAIT_S: then the longest waiting goes first, so nobody
starves.

Which requests share a call: those with the same temperature, top-p and stop strings,
since a sampler call draws every row under one `SamplingParams`. While others wait, a
reply is drawn in slices of at most SLICE_TOKENS tokens (alone, it is drawn whole: each
slice prefills its prompt again): after each slice an unfinished reply goes back in
the queue and continues from its prompt and
the tokens drawn so far (the same distribution: each token is drawn given everything
before it; a stop string that spans two slices still ends it). So a short request waits
for at most one slice, not for a long reply, and replies of different lengths share
calls (each call draws the fewest tokens any of its rows has left). A request with a
`seed` is sampled alone and whole, so that its reply does not depend on what else was
asked at the time; a `guided_choice` reply is drawn whole (its constraint follows the
reply from its first token) with requests asking the same length. Each row keeps its
own answer constraint. At most `max_rows` rows share a call.

A streamed request is told its tokens after each slice (`Job.progress`).

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
from collections.abc import Callable, Sequence
from typing import Any

from spiral.engines.base import CancelFlag, Sampler, SamplingCancelled, SamplingParams
from spiral.types import AnswerConstraint, Completion

MAX_ROWS = 16  # rows in one sampler call
SLICE_TOKENS = 16  # the most tokens a reply draws before others waiting get their turn
MAX_WAIT_S = 2.0  # past this in the queue a request goes first, whatever its length


@dataclasses.dataclass
class Job:
    """One request's prompt, as the sampler takes it, and where its completion goes."""

    prompt_ids: list[int]
    params: SamplingParams
    constraint: AnswerConstraint | None
    future: concurrent.futures.Future[Any] = dataclasses.field(
        default_factory=concurrent.futures.Future
    )
    queued: float = dataclasses.field(default_factory=time.monotonic)  # joined the queue
    tokens: list[int] = dataclasses.field(default_factory=list)  # drawn in earlier slices
    logprobs: list[float] = dataclasses.field(default_factory=list)
    # told the tokens drawn so far as they come (a streamed reply), in the model's thread
    progress: Callable[[tuple[int, ...]], None] | None = None

    def cancelled(self) -> bool:
        return self.params.cancel is not None and self.params.cancel.is_set()

    def sliced(self) -> bool:
        """Whether the reply may be drawn in slices (not seeded, not constrained)."""
        return self.params.seed is None and self.constraint is None

    def left(self) -> int:
        return self.params.max_tokens - len(self.tokens)


def share_key(job: Job) -> tuple[Any, ...] | None:
    """What requests must agree on to share a sampler call; None: sampled alone. Sliced
    replies need not agree on their length (the call draws the shortest one left)."""
    params = job.params
    if params.seed is not None:
        return None
    length = None if job.sliced() else params.max_tokens
    return (length, params.temperature, params.top_p, params.stop)


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


class ModelThread:
    """The queue of requests and the one thread that serves it; `_run` is the thread's
    work (batched calls here, a running batch in continuous.py)."""

    def __init__(self, sampler: Any, max_rows: int = MAX_ROWS) -> None:
        self.sampler, self.max_rows = sampler, max_rows
        self._waiting: list[Job] = []
        self._ready = threading.Condition()
        self._closed = False
        self.calls = 0  # model calls made (for tests and the load benchmark)

    def start(self) -> None:
        threading.Thread(target=self._run, name="spiral-serve-sampler", daemon=True).start()

    def _run(self) -> None:
        raise NotImplementedError

    def submit(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        constraint: AnswerConstraint | None,
        progress: Callable[[tuple[int, ...]], None] | None = None,
    ) -> concurrent.futures.Future[Any]:
        """Queue one prompt; the future gets its Completion (or SamplingCancelled).
        `progress`, if given, is called from the model's thread with the reply's tokens
        so far whenever more are drawn (it must return at once)."""
        job = Job(prompt_ids, params, constraint, progress=progress)
        with self._ready:
            self._waiting.append(job)
            self._ready.notify()
        return job.future

    def close(self) -> None:
        """End the thread once every request is answered (the server is stopping)."""
        with self._ready:
            self._closed = True
            self._ready.notify()


class Batcher(ModelThread):
    """The thread that samples for every request, batching those that arrive together."""

    def __init__(self, sampler: Sampler, max_rows: int = MAX_ROWS) -> None:
        super().__init__(sampler, max_rows)
        self.start()

    def _next_call(self) -> list[Job] | None:
        """Block until a request waits; take the oldest and those that can join it
        (None: closed and nothing left)."""
        with self._ready:
            while not self._waiting:
                if self._closed:
                    return None
                self._ready.wait()
            oldest = _first(self._waiting)
            key = share_key(oldest)
            take = [oldest]
            if key is not None:
                same = [j for j in self._waiting[1:] if share_key(j) == key]
                take += same[: self.max_rows - 1]
            taken = set(map(id, take))
            self._waiting = [j for j in self._waiting if id(j) not in taken]
        return take

    def _run(self) -> None:
        while (jobs := self._next_call()) is not None:
            live = still_wanted(jobs)
            if live:
                self._sample(live)

    def _sample(self, jobs: list[Job]) -> None:
        flags = [job.params.cancel for job in jobs]
        cancel = flags[0] if len(jobs) == 1 else AllCancelled(flags)
        length = jobs[0].params.max_tokens
        if jobs[0].sliced():
            length = min(job.left() for job in jobs)
            with self._ready:
                if self._waiting:  # others wait: a slice, then their turn
                    length = min(SLICE_TOKENS, length)
        params = dataclasses.replace(jobs[0].params, max_tokens=length, cancel=cancel)
        self.calls += 1
        unfinished = []
        try:
            completions = self.sampler.sample(
                [job.prompt_ids + job.tokens for job in jobs],
                params,
                [job.constraint for job in jobs],
            )
            for job, completion in zip(jobs, completions, strict=True):
                done = self._extend(job, completion)
                if done is not None:
                    settle(job, result=done)
                else:
                    unfinished.append(job)
                    if job.progress is not None:
                        job.progress(tuple(job.tokens))
        except BaseException as err:  # handed to every waiting request, the thread goes on
            for job in jobs:
                settle(job, error=err)
            return
        with self._ready:  # behind whoever arrived meanwhile
            for job in unfinished:
                job.queued = time.monotonic()
            self._waiting.extend(unfinished)

    def _extend(self, job: Job, completion: Completion) -> Completion | None:
        """Add a slice to `job`'s reply: the whole reply once it is finished (an end
        token, a stop string, its length reached), else None."""
        if not job.sliced():
            return completion
        job.tokens += completion.tokens
        job.logprobs += completion.logprobs
        decode = self.sampler.tokenizer.decode
        text = decode(job.tokens, skip_special_tokens=True)
        reason = completion.stop_reason
        if reason == "length" and any(stop in text for stop in job.params.stop):
            # a stop string across two slices: the reply ends at the token that made it
            reason = "stop"
            end = next(
                k
                for k in range(1, len(job.tokens) + 1)
                if any(
                    s in decode(job.tokens[:k], skip_special_tokens=True) for s in job.params.stop
                )
            )
            del job.tokens[end:], job.logprobs[end:]
            text = decode(job.tokens, skip_special_tokens=True)
        if reason == "length" and job.left() > 0:
            return None
        return Completion(tuple(job.tokens), tuple(job.logprobs), reason, text)


def _first(waiting: list[Job]) -> Job:
    """Whom the next call serves: a request that has waited MAX_WAIT_S, else the one
    with the fewest tokens left to draw (ties: the longest waiting)."""
    now = time.monotonic()
    overdue = [job for job in waiting if now - job.queued > MAX_WAIT_S]
    if overdue:
        return min(overdue, key=lambda job: job.queued)
    return min(waiting, key=lambda job: (job.left(), job.queued))


def still_wanted(jobs: list[Job]) -> list[Job]:
    """The jobs whose clients still wait; the others (left, timed out while queued) are
    answered SamplingCancelled without any sampling."""
    live = []
    for job in jobs:
        if job.cancelled():
            settle(job, error=SamplingCancelled("cancelled before sampling"))
        else:
            live.append(job)
    return live


def settle(job: Job, result: Any = None, error: BaseException | None = None) -> None:
    """Hand a request its outcome, unless its handler has stopped waiting for it."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(result)
