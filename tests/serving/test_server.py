"""`spiral serve`: the OpenAI-compatible schema, checked with the openai client itself."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from evaluation_cli import running_server, tiny_model_dir

from spiral.agents.model_agent import load_sampler, resolve_source
from spiral.cli import main as cli_main
from spiral.serving.server import create_app, main, parse_args


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    sampler = load_sampler(resolve_source(str(tiny_model_dir())), device="cpu")
    with running_server(create_app(sampler, "tiny-model")) as url:
        yield url


def test_openai_client_reads_the_reply(base_url: str) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    reply = client.chat.completions.create(
        model="tiny-model",
        messages=[
            {"role": "system", "content": "You play games."},
            {"role": "user", "content": "Your move. Answer like [4]."},
        ],
        max_tokens=5,
        temperature=0.0,
    )
    assert reply.object == "chat.completion"
    assert reply.model == "tiny-model"
    assert len(reply.choices) == 1
    choice = reply.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    assert reply.usage is not None
    assert 0 < reply.usage.completion_tokens <= 5
    assert reply.usage.prompt_tokens > 5
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    if choice.finish_reason == "length":
        assert reply.usage.completion_tokens == 5
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny-model"]


def test_greedy_is_repeatable_and_seeded_sampling_too(base_url: str) -> None:
    body = {"model": "x", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 6}
    greedy = [
        httpx.post(f"{base_url}/chat/completions", json={**body, "temperature": 0}).json()
        for _ in range(2)
    ]
    assert greedy[0]["choices"][0]["message"] == greedy[1]["choices"][0]["message"]
    seeded = [
        httpx.post(f"{base_url}/chat/completions", json={**body, "seed": 7}).json()
        for _ in range(2)
    ]
    assert seeded[0]["choices"][0]["message"] == seeded[1]["choices"][0]["message"]


def test_length_limit_is_reported_as_length(base_url: str) -> None:
    body = {
        "model": "x",
        "messages": [{"role": "user", "content": "tell me a long story"}],
        "max_tokens": 1,
        "temperature": 0,
    }
    data = httpx.post(f"{base_url}/chat/completions", json=body).json()
    # One token is either the end-of-turn token (stop) or the limit (length).
    assert data["usage"]["completion_tokens"] == 1
    assert data["choices"][0]["finish_reason"] in ("stop", "length")


def test_bad_requests_get_openai_errors(base_url: str) -> None:
    msgs = [{"role": "user", "content": "hi"}]
    two = httpx.post(f"{base_url}/chat/completions", json={"model": "x", "messages": msgs, "n": 2})
    assert two.status_code == 400
    assert "n=1" in two.json()["error"]["message"]
    empty = httpx.post(f"{base_url}/chat/completions", json={"model": "x", "messages": []})
    assert empty.status_code == 400
    assert empty.json()["error"]["type"] == "invalid_request_error"


def test_cli_arguments_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "checkpoint" in capsys.readouterr().out
    assert cli_main(["serve", "port=1"]) == 2
    assert "checkpoint= is required" in capsys.readouterr().err
    assert cli_main(["serve", "checkpoint=x", "colour=red"]) == 2
    assert "unknown key 'colour'" in capsys.readouterr().err
    assert cli_main(["serve", f"checkpoint={tmp_path / 'missing'}"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli_main(["serve", "checkpoint=base", "port=70000"]) == 2
    assert "port must be in 1..65535" in capsys.readouterr().err
    assert cli_main(["serve", "checkpoint=base", "template=chatgpt"]) == 2
    assert "expected one of chat, qwen3" in capsys.readouterr().err
    assert parse_args(["checkpoint=base", "port=9"]).port == 9


def test_requests_that_would_tie_the_server_up_are_refused(base_url: str) -> None:
    msgs = [{"role": "user", "content": "hi"}]
    huge = httpx.post(
        f"{base_url}/chat/completions", json={"model": "x", "messages": msgs, "max_tokens": 10**9}
    )
    assert huge.status_code == 400
    assert "max_tokens_limit" in huge.json()["error"]["message"]
    long_prompt = [{"role": "user", "content": "game " * 5000}]
    too_long = httpx.post(
        f"{base_url}/chat/completions",
        json={"model": "x", "messages": long_prompt, "max_tokens": 4},
    )
    assert too_long.status_code == 400
    assert "exceeds the model's context" in too_long.json()["error"]["message"]


@pytest.mark.parametrize(
    ("stop", "said"),
    [
        ("", "empty string"),
        (["]", ""], "empty string"),
        (["x"] * 17, "at most 16"),
        ("y" * 257, "at most 256"),
    ],  # fmt: skip
)
def test_stop_strings_that_would_end_or_slow_every_reply_are_refused(
    base_url: str, stop: object, said: str
) -> None:
    body = {"model": "x", "messages": [{"role": "user", "content": "hi"}], "stop": stop}
    reply = httpx.post(f"{base_url}/chat/completions", json=body)
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "stop" and said in reply.json()["error"]["message"]
    fine = httpx.post(f"{base_url}/chat/completions", json={**body, "stop": ["]"] * 16})
    assert fine.status_code == 200


def test_a_guided_choice_reply_is_one_whole_choice_whatever_the_length_and_stop(
    base_url: str,
) -> None:
    choices = ["hello world this is long", "another long choice"]
    body = {"model": "x", "messages": [{"role": "user", "content": "hi"}],
            "guided_choice": choices, "max_tokens": 1}  # fmt: skip
    reply = httpx.post(f"{base_url}/chat/completions", json=body).json()
    assert reply["choices"][0]["message"]["content"] in choices
    cut = httpx.post(f"{base_url}/chat/completions", json={**body, "stop": ["l"]})
    assert cut.status_code == 400 and cut.json()["error"]["param"] == "stop"


def test_bearer_token_is_required_when_configured() -> None:
    from openai import AuthenticationError, OpenAI

    sampler = load_sampler(resolve_source(str(tiny_model_dir())), device="cpu")
    with running_server(create_app(sampler, "tiny-model", api_key="s3cret")) as url:
        body = {"model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert httpx.post(f"{url}/chat/completions", json=body).status_code == 401
        wrong = OpenAI(base_url=url, api_key="nope", max_retries=0)
        with pytest.raises(AuthenticationError):
            wrong.chat.completions.create(**body)  # type: ignore[call-overload]
        right = OpenAI(base_url=url, api_key="s3cret", max_retries=0)
        reply = right.chat.completions.create(**body)  # type: ignore[call-overload]
        assert reply.usage is not None and reply.usage.completion_tokens <= 2


def test_api_key_env_must_name_a_set_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPIRAL_TEST_KEY", raising=False)
    assert cli_main(["serve", "checkpoint=base", "api_key_env=SPIRAL_TEST_KEY"]) == 2
    assert "empty or unset" in capsys.readouterr().err
    assert cli_main(["serve", "checkpoint=base", "max_tokens_limit=0"]) == 2


def test_a_long_guided_choice_is_held_to_the_limits(base_url: str) -> None:
    """The longest choice counts against max_tokens_limit and the context, after the
    reply's budget is raised to hold it."""
    msgs = [{"role": "user", "content": "pick"}]
    long_choice = httpx.post(
        f"{base_url}/chat/completions",
        json={"model": "x", "messages": msgs, "max_tokens": 4,
              "guided_choice": ["yes", "word " * 5000]},
        timeout=60,
    )  # fmt: skip
    assert long_choice.status_code == 400
    assert "guided_choice reply has" in long_choice.json()["error"]["message"]
    fine = httpx.post(
        f"{base_url}/chat/completions",
        json={"model": "x", "messages": msgs, "max_tokens": 4, "guided_choice": ["yes", "no"]},
        timeout=60,
    )
    assert fine.status_code == 200
    assert fine.json()["choices"][0]["message"]["content"] in ("yes", "no")


@pytest.mark.parametrize(
    "body",
    [
        {"messages": [{"role": "user", "content": "hi \ud800"}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}]},
        {"messages": [{"role": "user", "content": "pick"}], "guided_choice": ["a", "b\ud800"]},
    ],
)
def test_a_lone_surrogate_is_a_400_not_a_500(base_url: str, body: dict) -> None:
    raw = json.dumps({"model": "x", **body})  # JSON escapes the surrogate as \\ud800
    reply = httpx.post(
        f"{base_url}/chat/completions",
        content=raw,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert reply.status_code == 400
    assert "invalid Unicode" in reply.json()["error"]["message"]


def test_a_port_in_use_or_a_foreign_host_is_one_line_before_the_model_loads(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    from spiral.cli import main as cli_main

    monkeypatch.setattr(
        "spiral.agents.model_agent.load_sampler",
        lambda *a, **k: pytest.fail("the model was loaded before the address was checked"),
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for host in ("127.0.0.1", "256.1.1.1"):
            capsys.readouterr()
            assert cli_main(["serve", "checkpoint=base", f"host={host}", f"port={port}"]) == 2
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and f"cannot listen on {host}:{port}" in err
