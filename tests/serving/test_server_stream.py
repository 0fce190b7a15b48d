"""`spiral serve` with `stream: true`: server-sent events in OpenAI's chunk shape, read
by the official openai client and by hand; a streamed reply is the reply the same
request gets unstreamed, and a client that leaves mid-stream frees its row."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from evaluation_cli import running_server, tiny_model_dir

from spiral.agents.model_agent import load_sampler, resolve_source
from spiral.serving.server import create_app

USER = [{"role": "user", "content": "Your move. Answer like [4]."}]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Any]]:
    sampler = load_sampler(resolve_source(str(tiny_model_dir())), device="cpu")
    app = create_app(sampler, "tiny-model")
    with running_server(app) as url:
        yield url, app


def _events(url: str, body: dict[str, Any]) -> tuple[httpx.Response, list[Any]]:
    """The reply and its events, parsed as the openai client parses them: each `data:`
    line one JSON object, `[DONE]` last."""
    with httpx.stream("POST", f"{url}/chat/completions", json=body, timeout=120) as reply:
        lines = [line for line in reply.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines), lines
    payloads = [line.removeprefix("data: ") for line in lines]
    assert payloads[-1] == "[DONE]"
    return reply, [json.loads(p) for p in payloads[:-1]]


def _text(chunks: list[Any]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def test_the_openai_client_streams_the_reply_it_gets_unstreamed(
    served: tuple[str, Any],
) -> None:
    from openai import OpenAI

    url, _ = served
    client = OpenAI(base_url=url, api_key="unused", max_retries=0)
    asked: dict[str, Any] = {"model": "tiny-model", "messages": USER, "max_tokens": 12,
                             "temperature": 0.0}  # fmt: skip
    whole = client.chat.completions.create(**asked)
    chunks = list(
        client.chat.completions.create(**asked, stream=True, stream_options={"include_usage": True})
    )
    assert chunks, "no chunk came back"
    assert all(c.object == "chat.completion.chunk" and c.model == "tiny-model" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finished = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finished[-1] == whole.choices[0].finish_reason and set(finished[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage
    assert all(c.usage is None for c in chunks[:-1])


def test_events_are_server_sent_events_ending_in_done(served: tuple[str, Any]) -> None:
    url, _ = served
    body = {"messages": USER, "max_tokens": 6, "temperature": 0, "stream": True}
    reply, chunks = _events(url, body)
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert all("usage" not in c for c in chunks)  # only asked for with include_usage


def test_a_streamed_reply_ends_before_its_stop_string(served: tuple[str, Any]) -> None:
    url, _ = served
    body: dict[str, Any] = {"messages": USER, "max_tokens": 16, "temperature": 0}
    text = httpx.post(f"{url}/chat/completions", json=body, timeout=120).json()
    text = text["choices"][0]["message"]["content"]
    assert len(text) >= 6  # the tiny model's greedy reply runs on
    stop = text[3:5]
    cut = httpx.post(f"{url}/chat/completions", json={**body, "stop": [stop]}, timeout=120)
    _, chunks = _events(url, {**body, "stop": [stop], "stream": True})
    assert _text(chunks) == cut.json()["choices"][0]["message"]["content"]
    assert stop not in _text(chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_a_streamed_guided_choice_is_one_whole_choice(served: tuple[str, Any]) -> None:
    url, _ = served
    choices = ["[bet]", "[bet] twice", "[fold]"]
    for seed in range(3):
        body = {"messages": USER, "guided_choice": choices, "seed": seed, "stream": True}
        _, chunks = _events(url, body)
        assert _text(chunks) in choices
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_stream_options_without_stream_is_refused(served: tuple[str, Any]) -> None:
    url, _ = served
    body = {"messages": USER, "stream_options": {"include_usage": True}}
    reply = httpx.post(f"{url}/chat/completions", json=body, timeout=60)
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "stream_options"


def test_a_request_refused_before_streaming_is_a_plain_400(served: tuple[str, Any]) -> None:
    url, _ = served
    body = {"messages": USER, "max_tokens": 10**9, "stream": True}
    reply = httpx.post(f"{url}/chat/completions", json=body, timeout=60)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "max_tokens"


def test_a_client_that_leaves_mid_stream_frees_its_row(served: tuple[str, Any]) -> None:
    url, app = served
    body = {"messages": USER, "max_tokens": 4000, "temperature": 1.0, "stream": True}
    with httpx.stream("POST", f"{url}/chat/completions", json=body, timeout=120) as reply:
        seen = 0
        for line in reply.iter_lines():
            seen += line.startswith("data: {")
            if seen >= 3:  # the role chunk and two of text: the row is decoding
                break
    assert seen >= 3, "the reply was not streamed"
    batch = app.state.batcher.batch
    for _ in range(600):  # the row leaves at its next step; wait up to ~60 s
        if len(batch) == 0:
            break
        time.sleep(0.1)
    assert len(batch) == 0, "the row of a client that left kept decoding"


class CallsOnly:
    """The real sampler without its running batch, as vLLM is served (batcher.py)."""

    version = 0

    def __init__(self, real: Any) -> None:
        self.real, self.model, self.tokenizer = real, real.model, real.tokenizer

    def sample(self, *args: Any, **kwargs: Any) -> Any:
        return self.real.sample(*args, **kwargs)


def test_a_sampler_without_a_running_batch_streams_the_same_reply() -> None:
    sampler = CallsOnly(load_sampler(resolve_source(str(tiny_model_dir())), device="cpu"))
    with running_server(create_app(sampler, "tiny-model")) as url:  # type: ignore[arg-type]
        body: dict[str, Any] = {"messages": USER, "max_tokens": 10, "temperature": 0}
        whole = httpx.post(f"{url}/chat/completions", json=body, timeout=120).json()
        _, chunks = _events(url, {**body, "stream": True})
    assert _text(chunks) == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]


def test_streamed_text_holds_back_what_a_stop_string_or_a_split_character_may_take() -> None:
    from spiral.serving.streaming import TextStream

    pieces = {1: "ab", 2: "c]", 3: "\ufffd", 4: "é", 5: "xy"}
    text = TextStream(lambda tokens: "".join(pieces[t] for t in tokens), ["]]"])
    sent = [text.delta([1]), text.delta([1, 2]), text.delta([1, 2, 3])]
    assert sent == ["a", "bc", ""]  # the last character may begin "]]"; a split one waits
    assert text.delta([1, 2, 4]) == "]"  # no longer the start of a stop string
    assert text.rest("abc]éxy") == "éxy"
    rewritten = TextStream(lambda tokens: "abc", [])
    assert rewritten.delta([1]) == "abc"
    assert rewritten.rest("abd!") == "d!"  # sent from the first character that differs
    assert rewritten.rest("ab") == ""
