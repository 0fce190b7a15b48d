"""`spiral serve`'s model thread over the torch sampler: requests join a running batch
between tokens and leave it when done or cancelled."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from evaluation_cli import tiny_model_dir

from spiral.agents.model_agent import load_sampler, resolve_source
from spiral.engines.base import SamplingCancelled, SamplingParams
from spiral.serving.batcher import Batcher
from spiral.serving.continuous import ContinuousBatcher, make_batcher


@pytest.fixture(scope="module")
def real() -> Any:
    return load_sampler(resolve_source(str(tiny_model_dir())), device="cpu")


def _running(batcher: ContinuousBatcher, rows: int) -> None:
    deadline = time.monotonic() + 30
    while len(batcher.batch) < rows:
        assert time.monotonic() < deadline, "the request never started decoding"
        time.sleep(0.005)


def test_the_torch_sampler_is_served_by_a_running_batch(real: Any) -> None:
    assert isinstance(make_batcher(real), ContinuousBatcher)

    class Plain:  # a sampler without a running batch (vLLM, a test double)
        version, tokenizer = 0, None

        def sample(self, *args: Any) -> Any: ...

    assert isinstance(make_batcher(Plain()), Batcher)


def test_a_short_request_joins_a_long_reply_and_ends_first(real: Any) -> None:
    ids = real.tokenizer.encode("hello there")
    long_params = SamplingParams(max_tokens=120, temperature=0)
    whole = real.sample([ids], long_params)[0]
    assert len(whole.tokens) == 120  # this model's greedy reply runs to its length
    short_params = SamplingParams(max_tokens=3, temperature=0.8, top_p=0.9)
    batcher = ContinuousBatcher(real)
    long = batcher.submit(ids, long_params, None)
    _running(batcher, 1)
    short = batcher.submit(real.tokenizer.encode("hi"), short_params, None)
    assert len(short.result(timeout=60).tokens) <= 3
    assert not long.done()  # answered while the long reply was still decoding
    assert long.result(timeout=60).tokens == whole.tokens  # the join changed nothing
    batcher.close()


def test_a_cancelled_request_leaves_and_the_others_go_on(real: Any) -> None:
    ids = real.tokenizer.encode("hello there")
    greedy = SamplingParams(max_tokens=60, temperature=0)
    whole = real.sample([ids], greedy)[0]
    batcher = ContinuousBatcher(real)
    leaver = threading.Event()
    left = batcher.submit(ids, SamplingParams(max_tokens=200, cancel=leaver), None)
    stays = batcher.submit(ids, greedy, None)
    _running(batcher, 2)
    leaver.set()
    with pytest.raises(SamplingCancelled):
        left.result(timeout=30)
    assert stays.result(timeout=60).tokens == whole.tokens
    assert len(batcher.batch) == 0
    batcher.close()


def test_a_seeded_request_joins_the_batch_and_draws_what_it_draws_alone(real: Any) -> None:
    ids = real.tokenizer.encode("hello there")
    seeded = SamplingParams(max_tokens=20, temperature=1.0, seed=11)
    batcher = ContinuousBatcher(real)
    running = batcher.submit(ids, SamplingParams(max_tokens=80, temperature=0), None)
    _running(batcher, 1)
    got = batcher.submit(ids, seeded, None)
    _running(batcher, 2)  # decoding beside the other, not after it
    assert got.result(timeout=60).tokens == real.sample([ids], seeded)[0].tokens
    running.result(timeout=60)
    batcher.close()


def test_a_long_seeded_request_holds_nobody_up(real: Any) -> None:
    ids = real.tokenizer.encode("hello there")
    batcher = ContinuousBatcher(real)
    long = batcher.submit(ids, SamplingParams(max_tokens=120, temperature=0, seed=3), None)
    _running(batcher, 1)
    short = batcher.submit(ids, SamplingParams(max_tokens=2, seed=4), None)
    assert len(short.result(timeout=60).tokens) <= 2
    assert not long.done()
    long.result(timeout=60)
    batcher.close()


def test_a_request_that_fails_to_join_fails_alone(real: Any) -> None:
    ids = real.tokenizer.encode("hello there")
    batcher = ContinuousBatcher(real)
    running = batcher.submit(ids, SamplingParams(max_tokens=60, temperature=0), None)
    _running(batcher, 1)
    with pytest.raises(ValueError, match="at least one token"):
        batcher.submit([], SamplingParams(max_tokens=3), None).result(timeout=30)
    assert len(running.result(timeout=60).tokens) > 0  # the running request went on
    assert len(batcher.submit(ids, SamplingParams(max_tokens=3), None).result(30).tokens) <= 3
    batcher.close()


def test_a_short_request_is_not_kept_waiting_by_a_full_batch_of_long_ones(real: Any) -> None:
    ids = real.tokenizer.encode("hello there")
    batcher = ContinuousBatcher(real, max_rows=2)
    leave = threading.Event()
    long = [
        batcher.submit(ids, SamplingParams(max_tokens=2000, cancel=leave), None) for _ in range(3)
    ]
    _running(batcher, 2)  # the batch is full; the third long request waits
    short = batcher.submit(ids, SamplingParams(max_tokens=3, temperature=0), None)
    assert len(short.result(timeout=60).tokens) <= 3
    assert not any(f.done() for f in long)  # answered while every long reply decodes
    assert len(batcher.batch) == 2  # the waiting long request did not jump in with it
    leave.set()
    for future in long:
        with pytest.raises(SamplingCancelled):
            future.result(timeout=30)
    batcher.close()


def test_a_streaming_request_sees_its_tokens_as_they_are_decoded(real: Any) -> None:
    ids = real.tokenizer.encode("hello there")
    params = SamplingParams(max_tokens=12, temperature=0)
    seen: list[tuple[int, ...]] = []
    batcher = ContinuousBatcher(real)
    done = batcher.submit(ids, params, None, progress=lambda tokens: seen.append(tuple(tokens)))
    tokens = done.result(timeout=60).tokens
    batcher.close()
    assert len(seen) >= len(tokens) - 1  # one look per decoded token but the last
    assert all(len(a) < len(b) for a, b in zip(seen, seen[1:], strict=False))
    assert all(tuple(tokens[: len(s)]) == s for s in seen)
