"""Iteration-level batching: `spiral serve`'s model thread over a sampler's running batch.

Where the sampler can keep a batch open between tokens (`TorchSampler.running_batch`,
engines/torch/running.py), this thread decodes every request in one batch, one token a
step: between two steps, requests that arrived join (their prompts prefilled together)
and finished or cancelled ones leave. A short request then waits for at most one step
of the others and its own prefill, never for a long reply, and requests of any
temperature, top-p, length, stop strings or answer constraint share the same steps (each
row draws under its own parameters from its own random stream).

A request with a `seed` draws from the seed's own stream (the stream `sample` gives its
first row), so its reply is the one the sampler draws for it alone, up to floating-point
differences between batch shapes, which can move a draw only where its uniform falls
within rounding of a boundary; it joins the batch like any other, so a long seeded
request holds nobody up.

Admission: at most `max_rows` long requests decode together; the rest wait in arrival
order. A short request (a whole reply of at most SHORT_TOKENS tokens: a move, a
`guided_choice` answer) does not wait for a place among them: it joins at the next step
beside the long rows, in one of SHORT_ROWS places of its own, and leaves after its few
tokens. So however many long replies are running or waiting, a short request waits for
a step and its prefill, not for a long reply to end; long requests keep their
`max_rows` places whatever the short ones do. (Before, a 4-token request waited 0.19 s
behind 15 long replies and 47.4 s behind 16: for one of them to end. Measured in
docs/results/serve-admission/.) Each extra row costs a step a little time and its share
of the key-value cache (the batch's width, like any row). Under a stream of short
requests the long replies are so answered a little slower: 13 % fewer in the benchmark.

A streamed request is told its tokens after every step (`Job.progress`). Samplers without
a running batch (vLLM, test doubles) are served by batcher.py's calls instead
(`make_batcher`).
"""

from __future__ import annotations

from typing import Any

from spiral.engines.base import Sampler, SamplingCancelled
from spiral.serving.batcher import MAX_ROWS, Batcher, Job, ModelThread, settle, still_wanted

SHORT_TOKENS = 32  # a reply of at most this many tokens joins past a full batch
SHORT_ROWS = 16  # how many such rows may run beside `max_rows` long ones


def is_short(job: Job) -> bool:
    return job.params.max_tokens <= SHORT_TOKENS


def make_batcher(sampler: Sampler, max_rows: int = MAX_ROWS) -> Any:
    """The model thread for `sampler`: iteration-level where it keeps a running batch,
    else batched calls (batcher.py)."""
    if callable(getattr(sampler, "running_batch", None)):
        return ContinuousBatcher(sampler, max_rows)
    return Batcher(sampler, max_rows)


class ContinuousBatcher(ModelThread):
    """The thread that decodes every request in one running batch (module docstring)."""

    def __init__(self, sampler: Any, max_rows: int = MAX_ROWS) -> None:
        super().__init__(sampler, max_rows)
        self.batch = sampler.running_batch()
        self.start()

    def _take(self) -> list[Job] | None:
        """Block until there is work; the requests that join the batch now (None:
        closed and nothing left)."""
        with self._ready:
            while not self._waiting and not len(self.batch):
                if self._closed:
                    return None
                self._ready.wait()
            waiting, self._waiting = self._waiting, []
        joining, rest = self._admit(still_wanted(waiting))
        with self._ready:  # the rest wait, ahead of whoever arrived meanwhile
            self._waiting[:0] = rest
        return joining

    def _admit(self, live: list[Job]) -> tuple[list[Job], list[Job]]:
        """Who of `live` (in arrival order) joins now and who waits: long requests while
        fewer than `max_rows` long rows run, short ones while fewer than SHORT_ROWS
        short rows do (module docstring)."""
        running = [row.owner for row in self.batch.rows]
        room_long = self.max_rows - sum(not is_short(job) for job in running)
        room_short = SHORT_ROWS - sum(map(is_short, running))
        joining, rest = [], []
        for job in live:
            if is_short(job) and room_short > 0:
                room_short -= 1
                joining.append(job)
            elif not is_short(job) and room_long > 0:
                room_long -= 1
                joining.append(job)
            else:
                rest.append(job)
        return joining, rest

    def _run(self) -> None:
        while (joining := self._take()) is not None:
            if joining:
                self._join(joining)
            try:
                self._step()
            except BaseException as err:  # handed to every request in the batch; go on
                for row in self.batch.rows:
                    settle(row.owner, error=err)
                self.batch = self.sampler.running_batch()

    def _join(self, jobs: list[Job]) -> None:
        """Prefill `jobs` into the batch; a failure is theirs alone (the batch is
        unchanged until a join succeeds)."""
        self.calls += 1
        try:
            self.batch.join(
                [job.prompt_ids for job in jobs],
                [job.params for job in jobs],
                [job.constraint for job in jobs],
                jobs,
            )
        except BaseException as err:
            for job in jobs:
                settle(job, error=err)

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
        for row in self.batch.rows:
            if row.owner.progress is not None:
                row.owner.progress(tuple(row.tokens))
