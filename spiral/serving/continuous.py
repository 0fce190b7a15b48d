"""Iteration-level batching: `spiral serve`'s model thread over a sampler's running batch.

Where the sampler can keep a batch open between tokens (`TorchSampler.running_batch`,
engines/torch/running.py), this thread decodes every request in one batch, one token a
step: between two steps, requests that arrived join (their prompts prefilled together)
and finished or cancelled ones leave. A short request then waits for at most one step
of the others and its own prefill, never for a long reply, and requests of any
temperature, top-p, length, stop strings or answer constraint share the same steps (each
row draws under its own parameters from its own random stream).

A request with a `seed` is sampled alone and whole by the sampler between two steps, so
that its reply does not depend on what else was asked at the time (a batch's shape can
move a log-prob in its last bits). At most `max_rows` requests decode together; the
rest wait in arrival order. Samplers without a running batch (vLLM, test doubles) are
served by batcher.py's calls instead (`make_batcher`).
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

from spiral.engines.base import Sampler, SamplingCancelled, SamplingParams
from spiral.serving.batcher import MAX_ROWS, Batcher, Job, settle
from spiral.types import AnswerConstraint


def make_batcher(sampler: Sampler, max_rows: int = MAX_ROWS) -> Any:
    """The model thread for `sampler`: iteration-level where it keeps a running batch,
    else batched calls (batcher.py)."""
    if callable(getattr(sampler, "running_batch", None)):
        return ContinuousBatcher(sampler, max_rows)
    return Batcher(sampler, max_rows)


class ContinuousBatcher:
    """The thread that decodes every request in one running batch (module docstring)."""

    def __init__(self, sampler: Any, max_rows: int = MAX_ROWS) -> None:
        self.sampler, self.max_rows = sampler, max_rows
        self.batch = sampler.running_batch()
        self._waiting: list[Job] = []
        self._ready = threading.Condition()
        self._closed = False
        self.calls = 0  # prefills, steps and whole samples run (for tests and benchmarks)
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
        """End the thread once every request is answered (the server is stopping)."""
        with self._ready:
            self._closed = True
            self._ready.notify()

    def _take(self) -> tuple[list[Job], Job | None] | None:
        """Block until there is work: the requests that join the batch now and a seeded
        one to sample alone (None: closed and nothing left)."""
        with self._ready:
            while not self._waiting and not len(self.batch):
                if self._closed:
                    return None
                self._ready.wait()
            waiting, self._waiting = self._waiting, []
        live = []
        for job in waiting:
            if job.cancelled():  # the client left (or timed out) while it waited
                settle(job, error=SamplingCancelled("cancelled before sampling"))
            else:
                live.append(job)
        seeded = next((job for job in live if job.params.seed is not None), None)
        room = self.max_rows - len(self.batch)
        joining = [job for job in live if job is not seeded][: max(room, 0)]
        taken = {id(job) for job in joining} | {id(seeded)}
        with self._ready:  # the rest wait, ahead of whoever arrived meanwhile
            self._waiting[:0] = [job for job in live if id(job) not in taken]
        return joining, seeded

    def _run(self) -> None:
        while (work := self._take()) is not None:
            joining, seeded = work
            if seeded is not None:
                self._alone(seeded)
            try:
                if joining:
                    self.calls += 1
                    self.batch.join(
                        [job.prompt_ids for job in joining],
                        [job.params for job in joining],
                        [job.constraint for job in joining],
                        joining,
                    )
                self._step()
            except BaseException as err:  # handed to every request in the batch; go on
                owners = [row.owner for row in self.batch.rows]
                for job in {id(j): j for j in [*owners, *joining]}.values():
                    settle(job, error=err)
                self.batch = self.sampler.running_batch()

    def _step(self) -> None:
        gone = [row.owner for row in self.batch.rows if row.owner.cancelled()]
        if gone:
            self.batch.leave(gone)
            for job in gone:
                settle(job, error=SamplingCancelled("sampling was cancelled"))
        if not len(self.batch):
            return
        self.calls += 1
        for row in self.batch.step():
            settle(row.owner, result=self.batch.completion(row))

    def _alone(self, job: Job) -> None:
        self.calls += 1
        try:
            completion = self.sampler.sample([job.prompt_ids], job.params, [job.constraint])[0]
            settle(job, result=completion)
        except BaseException as err:
            settle(job, error=err)
