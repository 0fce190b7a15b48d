"""`spiral serve` and the OpenAI chat-completions fields it does not offer: a field that
would change the reply (log-probs, a JSON response format, tools, images, penalties) is
a 400 naming the field and what to do, never dropped; harmless ones are accepted. A
generated request over every field is answered 200 in OpenAI's shape, or a 4xx naming
the field, never a 5xx."""

from __future__ import annotations

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

USER = [{"role": "user", "content": "hi"}]
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
AUDIO = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
TOOL = {"type": "function", "function": {"name": "move", "parameters": {"type": "object"}}}


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    sampler = load_sampler(resolve_source(str(tiny_model_dir())), device="cpu")
    app = create_app(sampler, "tiny", max_tokens_limit=16, request_timeout_s=60)
    with running_server(app) as url:
        yield url


REFUSED = [
    ({"logprobs": True}, "logprobs"),
    ({"logprobs": True, "top_logprobs": 2}, "logprobs"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
        "response_format",
    ),  # fmt: skip
    ({"tools": [TOOL]}, "tools"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"functions": [TOOL["function"]]}, "functions"),
    ({"function_call": {"name": "move"}}, "function_call"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"frequency_penalty": -1.0}, "frequency_penalty"),
    ({"logit_bias": {"17": 5}}, "logit_bias"),
    ({"modalities": ["text", "audio"]}, "modalities"),
    ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
    ({"prediction": {"type": "content", "content": "x"}}, "prediction"),
    ({"reasoning_effort": "high"}, "reasoning_effort"),
    ({"web_search_options": {}}, "web_search_options"),
    ({"verbosity": "low"}, "verbosity"),
    ({"best_of": 3}, "best_of"),
    ({"top_k": 5}, "top_k"),
    ({"guided_json": {"type": "object"}}, "guided_json"),
    ({"temperture": 0.5}, "temperture"),  # a misspelt field is not dropped either
    (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "look"}, IMAGE]}]},
        "messages[0].content[1]",
    ),  # fmt: skip
    ({"messages": [{"role": "user", "content": [AUDIO]}]}, "messages[0].content[0]"),
    (
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "1", "type": "function"}],
                },
                *USER,
            ]
        },
        "messages[0].tool_calls",
    ),  # fmt: skip
]


@pytest.mark.parametrize(("extra", "field"), REFUSED, ids=[f for _, f in REFUSED])
def test_a_field_that_would_change_the_reply_is_a_400_naming_it(
    base_url: str, extra: dict[str, Any], field: str
) -> None:
    reply = httpx.post(f"{base_url}/chat/completions", json={"messages": USER, **extra})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == field and error["type"] == "invalid_request_error"
    message = error["message"]
    assert field.split("[")[0] in message and "\n" not in message
    assert any(word in message for word in ("drop", "remove", "send", "use")), message


HARMLESS = [
    {"user": "player-1", "metadata": {"game": "kuhn"}, "store": False},
    {"service_tier": "auto", "prompt_cache_key": "k", "safety_identifier": "s"},
    {"parallel_tool_calls": True, "tool_choice": "none", "tools": [], "functions": []},
    {"logprobs": False, "top_logprobs": None, "presence_penalty": 0, "frequency_penalty": 0.0},
    {"logit_bias": {}, "response_format": {"type": "text"}, "modalities": ["text"]},
    {"stream": False, "n": 1, "audio": None, "function_call": "none"},
    {"messages": [{"role": "user", "name": "alice", "content": [{"type": "text", "text": "hi"}]}]},
]


@pytest.mark.parametrize("extra", HARMLESS)
def test_fields_that_change_nothing_are_accepted(base_url: str, extra: dict[str, Any]) -> None:
    body = {"messages": USER, "max_tokens": 2, **extra}
    reply = httpx.post(f"{base_url}/chat/completions", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["role"] == "assistant"


def test_a_value_of_the_wrong_type_names_its_field(base_url: str) -> None:
    reply = httpx.post(
        f"{base_url}/chat/completions", json={"messages": USER, "temperature": "hot"}
    )
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "temperature"
    assert "temperature" in reply.json()["error"]["message"]


# Every chat-completions field, each with values it takes and values it does not.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),  # fmt: skip
    max_leaves=8,
)
parts = st.sampled_from([{"type": "text", "text": "hi"}, IMAGE, AUDIO, {"type": "file"},
                         {"type": "text"}, {"type": "refusal", "refusal": "no"}])  # fmt: skip
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "developer", "tool"]),
         "content": st.text(max_size=20) | st.lists(parts, min_size=1, max_size=2) | st.none()},
        optional={"name": st.text(max_size=5), "tool_calls": json_values,
                  "tool_call_id": st.text(max_size=5)},
    ),
    min_size=1, max_size=3,
)  # fmt: skip
FIELDS: dict[str, Any] = {
    "model": st.text(max_size=8),
    "max_tokens": st.integers(-1, 20) | st.none(),
    "max_completion_tokens": st.integers(-1, 20) | st.none(),
    "temperature": st.floats(-1, 3) | st.none(),
    "top_p": st.floats(-0.5, 1.5) | st.none(),
    "n": st.integers(0, 3) | st.none(),
    "seed": st.integers(-(2**63), 2**63) | st.none(),
    "stop": st.none() | st.text(max_size=3) | st.lists(st.text(max_size=3), max_size=5),
    "stream": st.booleans() | st.none(),
    "stream_options": st.none() | st.fixed_dictionaries({"include_usage": st.booleans()}),
    "logprobs": st.booleans() | st.none(),
    "top_logprobs": st.integers(0, 5) | st.none(),
    "presence_penalty": st.floats(-2, 2) | st.none(),
    "frequency_penalty": st.floats(-2, 2) | st.none(),
    "logit_bias": st.none()
    | st.dictionaries(
        st.sampled_from(["1", "2", "x"]), st.integers(-100, 100), max_size=2
    ),  # fmt: skip
    "response_format": st.none()
    | st.sampled_from(
        [{"type": "text"}, {"type": "json_object"}, {"type": "json_schema"}, {"type": 3}]
    ),
    "tools": st.none() | st.lists(st.just(TOOL), max_size=2),
    "tool_choice": st.none() | st.sampled_from(["none", "auto", "required"]),
    "parallel_tool_calls": st.booleans() | st.none(),
    "functions": st.none() | st.lists(st.just(TOOL["function"]), max_size=1),
    "function_call": st.none() | st.sampled_from(["none", "auto"]),
    "user": st.text(max_size=5) | st.none(),
    "metadata": st.none() | st.dictionaries(st.text(max_size=3), st.text(max_size=3)),
    "store": st.booleans() | st.none(),
    "service_tier": st.none() | st.sampled_from(["auto", "default", "flex"]),
    "modalities": st.none() | st.lists(st.sampled_from(["text", "audio"]), max_size=2),
    "audio": st.none() | st.just({"voice": "alloy", "format": "wav"}),
    "prediction": st.none() | st.just({"type": "content", "content": "x"}),
    "reasoning_effort": st.none() | st.sampled_from(["low", "high"]),
    "verbosity": st.none() | st.sampled_from(["low", "high"]),
    "web_search_options": st.none() | st.just({}),
    "prompt_cache_key": st.none() | st.text(max_size=5),
    "safety_identifier": st.none() | st.text(max_size=5),
    "guided_choice": st.none() | st.lists(st.text(max_size=6), max_size=3),
    "structured_outputs": st.none()
    | st.fixed_dictionaries({"choice": st.lists(st.text(max_size=6), max_size=3)}),
    "guided_regex": st.none() | st.text(max_size=5),
    "unknown_field": json_values,
}
requests = st.fixed_dictionaries(
    {"messages": messages},
    optional={name: values | json_values for name, values in FIELDS.items()},
)


def _check(reply: httpx.Response, body: dict[str, Any]) -> None:
    assert reply.status_code < 500, reply.text[:500]
    if reply.status_code != 200:
        error = reply.json()["error"]
        assert 400 <= reply.status_code < 500 and error["message"]
        named = error["param"]
        assert named, error
        assert named.split(".")[0].split("[")[0] in body, (named, sorted(body))
        return
    if body.get("stream"):
        lines = [line for line in reply.text.splitlines() if line]
        assert lines[-1] == "data: [DONE]", lines[-3:]
        chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
        assert all(c["object"] == "chat.completion.chunk" for c in chunks)
        assert "error" not in chunks[-1], chunks[-1]
        ends = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
        assert ends[-1] in ("stop", "length")
        return
    data = reply.json()
    assert isinstance(data["choices"][0]["message"]["content"], str)
    assert data["choices"][0]["finish_reason"] in ("stop", "length")
    assert data["usage"]["completion_tokens"] <= 16


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(body=requests)
def test_generated_requests_over_every_field_get_a_reply_or_a_4xx_naming_a_field(
    base_url: str, body: dict[str, Any]
) -> None:
    raw = json.dumps(body, allow_nan=True)
    reply = httpx.post(
        f"{base_url}/chat/completions",
        content=raw,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    _check(reply, body)
