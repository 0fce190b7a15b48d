"""`spiral serve` under generated requests: bodies of any JSON shape, depth, size and
encoding, fields of the wrong type or range, alone and many at once. Every answer is a
200 in OpenAI's reply shape or a 4xx in its error shape; never a 5xx, never a hang."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from evaluation_cli import running_server, tiny_model_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spiral.agents.model_agent import load_sampler, resolve_source
from spiral.serving.server import create_app

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
roles = st.sampled_from(["system", "user", "assistant", "developer", "tool", "robot", "", 7])
contents = st.one_of(
    st.text(max_size=200),
    st.lists(
        st.fixed_dictionaries(
            {"type": st.sampled_from(["text", "image_url", 3]), "text": st.text(max_size=30)}
        ),
        max_size=3,
    ),
    json_values,
)
messages = (
    st.lists(st.fixed_dictionaries({"role": roles, "content": contents}), max_size=4) | json_values
)
small_ints = st.integers(-3, 12) | st.sampled_from([0, 10**9, -(10**12), 2**64]) | json_values
requests = st.fixed_dictionaries(
    {"messages": messages},
    optional={
        "model": json_values,
        "max_tokens": small_ints,
        "max_completion_tokens": small_ints,
        "temperature": st.floats() | json_values,
        "top_p": st.floats() | json_values,
        "n": small_ints,
        "seed": small_ints,
        "stop": st.text(max_size=5) | st.lists(st.text(max_size=5), max_size=300) | json_values,
        "guided_choice": st.lists(st.text(max_size=12), max_size=6) | json_values,
        "structured_outputs": st.fixed_dictionaries(
            {"choice": st.lists(st.text(max_size=8), max_size=4)}
        )
        | json_values,
        "guided_regex": json_values,
    },
)


def _encode(body: dict[str, Any], how: str, depth: int) -> bytes:
    """The body as bytes: JSON in UTF-8 (nested `depth` deep if asked), another encoding,
    or broken on purpose."""
    text = json.dumps(body, allow_nan=True)
    if how == "nested":
        text = '{"messages": ' + "[" * depth + "]" * depth + "}"
    if how == "truncated":
        return text.encode()[: max(len(text) // 2, 1)]
    if how == "utf-16":
        return text.encode("utf-16")
    if how == "latin-1 bytes":
        return text.encode("utf-8", "surrogatepass").replace(b"a", b"\xe9")
    return text.encode("utf-8", "surrogatepass")


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    sampler = load_sampler(resolve_source(str(tiny_model_dir())), device="cpu")
    app = create_app(sampler, "tiny", max_tokens_limit=16, request_timeout_s=60)
    with running_server(app) as url:
        yield url


def _judge(reply: httpx.Response) -> None:
    assert reply.status_code < 500, reply.text[:500]
    body = reply.json()
    if reply.status_code == 200:
        choice = body["choices"][0]
        assert isinstance(choice["message"]["content"], str)
        assert choice["finish_reason"] in ("stop", "length")
        assert body["usage"]["completion_tokens"] <= 16
    else:
        assert 400 <= reply.status_code < 500
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]


encodings = st.sampled_from(
    ["utf-8", "utf-8", "utf-8", "nested", "truncated", "utf-16", "latin-1 bytes"]
)


@SETTINGS
@given(body=requests, how=encodings, depth=st.integers(1, 100_000))
def test_generated_requests_get_a_reply_or_a_4xx(
    base_url: str, body: Any, how: str, depth: int
) -> None:
    content = _encode(body, how, depth)
    ctype = "application/json" if how != "utf-16" else "application/json; charset=utf-16"
    reply = httpx.post(
        f"{base_url}/chat/completions", content=content, headers={"content-type": ctype}, timeout=60
    )
    _judge(reply)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(bodies=st.lists(st.tuples(requests, encodings), min_size=4, max_size=12))
def test_generated_requests_at_once_each_get_a_reply_or_a_4xx(base_url: str, bodies: Any) -> None:
    async def send_all() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120) as client:
            return await asyncio.gather(
                *(
                    client.post(
                        f"{base_url}/chat/completions",
                        content=_encode(b, how, 50),
                        headers={"content-type": "application/json"},
                    )
                    for b, how in bodies
                )
            )

    for reply in asyncio.run(send_all()):
        _judge(reply)
