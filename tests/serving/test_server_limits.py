"""`spiral serve` under requests that used to stall it: bodies refused unread, prompts
refused untokenised, checks that do not wait for the model, requests that arrive
together sampled together, and a time limit per request."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
from evaluation_cli import running_server, tiny_model_dir

from spiral.agents.model_agent import load_sampler, resolve_source
from spiral.engines.base import SamplingCancelled, SamplingParams
from spiral.serving.batcher import AllCancelled, Batcher, Job, share_key
from spiral.serving.limits import PromptBound, max_token_bytes
from spiral.serving.server import create_app
from spiral.types import AnswerConstraint, Completion

USER = [{"role": "user", "content": "Your move."}]


@pytest.fixture(scope="module")
def real() -> Any:
    return load_sampler(resolve_source(str(tiny_model_dir())), device="cpu")


HELD = 0.7  # the temperature of requests the stand-in holds


class Gated:
    """The real sampler behind a gate: a call at temperature HELD waits until the gate
    opens (or its cancel flag is set), then ends its rows after 3 tokens; every call's
    row count is recorded."""

    version = 0

    def __init__(self, real: Any) -> None:
        self.real, self.model = real, real.model
        self.gate, self.holding = threading.Event(), threading.Event()
        self.calls: list[int] = []
        self.cancelled = threading.Event()

    @property
    def tokenizer(self) -> Any:
        return self.real.tokenizer

    def sample(self, prompts: Any, params: SamplingParams, constraints: Any = None) -> Any:
        self.calls.append(len(prompts))
        if params.temperature != HELD:
            return self.real.sample(prompts, params, constraints)
        self.holding.set()
        while not self.gate.wait(0.02):
            if params.cancel is not None and params.cancel.is_set():
                self.cancelled.set()
                raise SamplingCancelled("cancelled")
        done = self.real.sample(prompts, SamplingParams(max_tokens=3, temperature=0), constraints)
        return [dataclasses.replace(c, stop_reason="eos") for c in done]


@pytest.fixture
def gated(real: Any) -> Iterator[tuple[Gated, str]]:
    sampler = Gated(real)
    with running_server(create_app(sampler, "tiny", max_request_mb=1)) as url:
        yield sampler, url
        sampler.gate.set()


def _raw(url: str, head: bytes, body: bytes = b"") -> bytes:
    """Send `head` and `body` on a plain socket and return what the server answers."""
    where = urlparse(url)
    with socket.create_connection((where.hostname, where.port), timeout=10) as sock:
        sock.sendall(head + body)
        answer = b""
        while chunk := sock.recv(65536):  # the server closes the connection after it
            answer += chunk
        return answer


def test_a_body_over_the_limit_is_refused_from_its_length_unread(gated: Any) -> None:
    _, url = gated
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: 50000000\r\n\r\n"
    )
    answer = _raw(url, head, b'{"messages": [')  # 50 MB declared, 14 bytes sent
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"50,000,000 bytes" in answer and b"max_request_mb" in answer


def test_a_chunked_body_over_the_limit_is_refused(gated: Any) -> None:
    _, url = gated

    def chunks() -> Iterator[bytes]:
        for _ in range(40):  # 40 x 64 KiB: past the 1 MiB limit
            yield b" " * 65536

    reply = httpx.post(
        f"{url}/chat/completions", content=chunks(), headers={"content-type": "application/json"}
    )
    assert reply.status_code == 413
    assert "max_request_mb" in reply.json()["error"]["message"]


def test_a_prompt_that_cannot_fit_is_refused_untokenised(real: Any) -> None:
    bound = PromptBound(real.tokenizer)
    room = 100
    longest = max_token_bytes(real.tokenizer)
    assert bound.refusal("a" * room, room) is None  # could fit: left to the exact count
    text = "go " * (room * bound.bytes_per_token)
    assert len(real.tokenizer.encode(text)) > room  # the bound never refuses a fitting one
    assert "shorten the messages" in (bound.refusal(text, room) or "")
    assert longest >= max(
        len(real.tokenizer.decode([i]).encode()) for i in range(len(real.tokenizer))
    )


def test_checks_do_not_wait_for_the_model(gated: Any) -> None:
    sampler, url = gated
    body = {"messages": USER, "max_tokens": 100, "temperature": HELD}
    held = threading.Thread(
        target=httpx.post, args=(f"{url}/chat/completions",), kwargs={"json": body, "timeout": 60}
    )
    held.start()
    assert sampler.holding.wait(30)
    long_prompt = {"messages": [{"role": "user", "content": "go " * 40_000}], "max_tokens": 4}
    reply = httpx.post(f"{url}/chat/completions", json=long_prompt, timeout=30)
    assert reply.status_code == 400 and "context" in reply.json()["error"]["message"]
    assert not sampler.gate.is_set()  # answered while the model was still held
    sampler.gate.set()
    held.join(timeout=30)


def test_requests_that_arrive_together_share_one_call(gated: Any) -> None:
    sampler, url = gated
    replies: list[Any] = []

    def ask(body: dict[str, Any]) -> None:
        replies.append(httpx.post(f"{url}/chat/completions", json=body, timeout=60))

    first = threading.Thread(
        target=ask, args=({"messages": USER, "max_tokens": 100, "temperature": HELD},)
    )
    first.start()
    assert sampler.holding.wait(30)
    prompts = ["Your move.", "Pick one.", "What now?", "Go on."]
    askers = [
        threading.Thread(
            target=ask,
            args=(
                {"messages": [{"role": "user", "content": p}], "max_tokens": 3, "temperature": 0},
            ),
        )
        for p in prompts
    ]
    for t in askers:
        t.start()
    time.sleep(1.0)  # all four queued behind the held call
    sampler.gate.set()
    for t in [first, *askers]:
        t.join(timeout=60)
    assert [r.status_code for r in replies] == [200] * 5
    assert sampler.calls == [1, 4]
    alone = [
        httpx.post(
            f"{url}/chat/completions",
            json={"messages": [{"role": "user", "content": p}], "max_tokens": 3, "temperature": 0},
        ).json()
        for p in prompts
    ]
    together = {r.json()["choices"][0]["message"]["content"] for r in replies[1:]}
    assert together == {a["choices"][0]["message"]["content"] for a in alone}


def test_a_request_over_its_time_limit_is_answered_408(real: Any) -> None:
    sampler = Gated(real)
    app = create_app(sampler, "tiny", request_timeout_s=0.5)
    with running_server(app) as url:
        reply = httpx.post(
            f"{url}/chat/completions",
            json={"messages": USER, "max_tokens": 100, "temperature": HELD},
            timeout=30,
        )
        assert reply.status_code == 408
        assert "request_timeout_s" in reply.json()["error"]["message"]
        assert sampler.cancelled.wait(10)  # the model was freed, not left generating
        ok = httpx.post(
            f"{url}/chat/completions", json={"messages": USER, "max_tokens": 3}, timeout=30
        )
        assert ok.status_code == 200


def test_one_leaver_does_not_cancel_the_others_in_its_call() -> None:
    a, b = threading.Event(), threading.Event()
    flag = AllCancelled([a, b])
    a.set()
    assert not flag.is_set() and not flag.wait(0.05)
    b.set()
    assert flag.is_set() and flag.wait(0)


def test_seeded_requests_are_sampled_alone_and_others_by_parameters() -> None:
    def key(constraint: Any = None, **kw: Any) -> Any:
        return share_key(Job([1], SamplingParams(**kw), constraint))

    choice = AnswerConstraint(choices=((5,), (6,)))
    assert key(seed=3) is None
    assert key(max_tokens=4) == key(max_tokens=40)  # sliced: lengths may differ
    assert key(choice, max_tokens=4) != key(choice, max_tokens=5)  # drawn whole
    assert key(stop=("]",)) != key()
    assert key(temperature=0) != key()


def test_the_batcher_drops_a_request_cancelled_while_it_waits(real: Any) -> None:
    sampler = Gated(real)
    batcher = Batcher(sampler)
    ids = real.tokenizer.encode("hi")
    held = batcher.submit(
        ids, SamplingParams(max_tokens=100, temperature=HELD, cancel=threading.Event()), None
    )
    assert sampler.holding.wait(30)
    leaver = threading.Event()
    left = batcher.submit(ids, SamplingParams(max_tokens=3, cancel=leaver), None)
    leaver.set()
    sampler.gate.set()
    assert len(held.result(timeout=30).tokens) <= 3
    with pytest.raises(SamplingCancelled):
        left.result(timeout=30)
    assert sampler.calls == [1]  # the leaver never reached the sampler
    batcher.close()


class Letters:
    """A stand-in tokenizer (token t is the letter a+t) and sampler: each call draws
    0, 1, 2, ... for every row up to max_tokens and never looks for stop strings, so
    slicing and stop handling are the batcher's alone. The first call waits for `gate`."""

    version = 0

    def __init__(self) -> None:
        self.tokenizer, self.calls, self.gate = self, [], threading.Event()
        self.short_by_one = False

    def decode(self, tokens: Any, skip_special_tokens: bool = True) -> str:
        return "".join(chr(97 + t % 26) for t in tokens)

    def sample(self, prompts: Any, params: SamplingParams, constraints: Any = None) -> Any:
        self.calls.append((len(prompts), params.max_tokens))
        self.gate.wait(30)
        rows = len(prompts) - (1 if self.short_by_one else 0)
        return [
            Completion(tuple(range(done := len(p) - 1, done + params.max_tokens)),
                       (0.0,) * params.max_tokens, "length", "")
            for p in prompts[:rows]
        ]  # fmt: skip


def test_replies_are_sliced_while_others_wait_and_a_stop_across_slices_ends_them() -> None:
    sampler = Letters()
    batcher = Batcher(sampler)
    held = batcher.submit([0], SamplingParams(max_tokens=1, temperature=0.3), None)
    time.sleep(0.2)  # the held call is in the sampler; these two wait behind it
    long = batcher.submit([0], SamplingParams(max_tokens=40, stop=("uvw",)), None)
    other = batcher.submit([0], SamplingParams(max_tokens=40, temperature=0.5), None)
    sampler.gate.set()
    held.result(timeout=30)
    got = long.result(timeout=30)
    assert got.stop_reason == "stop" and got.text.endswith("uvw")
    assert len(got.tokens) == len(got.text) == 23  # the usage counts end at the stop
    assert len(other.result(timeout=30).tokens) == 40
    assert (1, 16) in sampler.calls  # a slice while the other waited
    batcher.close()


def test_a_sampler_failure_reaches_its_requests_and_the_thread_goes_on() -> None:
    sampler = Letters()
    sampler.gate.set()
    sampler.short_by_one = True  # a sampler that returns a row too few
    batcher = Batcher(sampler)
    with pytest.raises(ValueError):
        batcher.submit([0], SamplingParams(max_tokens=3), None).result(timeout=30)
    sampler.short_by_one = False
    assert (
        len(batcher.submit([0], SamplingParams(max_tokens=3), None).result(timeout=30).tokens) == 3
    )
    batcher.close()
