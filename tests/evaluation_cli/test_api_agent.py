"""The API opponent: a full evaluation through the real `spiral serve`, retries against
real flaky HTTP servers (errors that then succeed count like any call), a reply that is
not a legal move lost like a local model's, and an endpoint that stays unreachable or
refuses the request stopping the evaluation in one line, never scored as games won."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from spiral import agents, games
from spiral.agents import api_agent
from spiral.agents.api_agent import ApiAgent, ApiCallError, chat_messages, make_api_agent
from spiral.agents.model_agent import load_sampler, resolve_source
from spiral.errors import SpiralError
from spiral.evaluation.match import evaluate
from spiral.prompts.invalid import invalid_policy
from spiral.prompts.spec import PromptSpec
from spiral.serving.server import create_app

from . import chat_server, free_port, running_server, tiny_model_dir


class FlakyHandler(BaseHTTPRequestHandler):
    """Fails the first `server.failures` requests with `server.fail_status`, then answers
    "[4]" (or, for an unretryable status, always fails)."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        server = self.server
        length = int(self.headers.get("content-length", 0))
        server.bodies.append(json.loads(self.rfile.read(length)))  # type: ignore[attr-defined]
        server.auth.append(self.headers.get("authorization"))  # type: ignore[attr-defined]
        if len(server.bodies) <= server.failures:  # type: ignore[attr-defined]
            self.send_response(server.fail_status)  # type: ignore[attr-defined]
            self.send_header("retry-after", "0")
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "try again"}}')
            return
        reply = {
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "content": getattr(server, "content", "I play [4]"),
                    }
                }
            ],
            "usage": getattr(server, "usage", {"prompt_tokens": 11, "completion_tokens": 3}),
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        del format, args  # keep test output clean


@pytest.fixture
def flaky() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FlakyHandler)
    server.bodies, server.auth = [], []  # type: ignore[attr-defined]
    server.failures, server.fail_status = 2, 500  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


def test_retries_500_then_succeeds(
    flaky: ThreadingHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPIRAL_TEST_KEY", "sk-secret-value")
    agent = make_api_agent(
        "flaky-model", base_url=_url(flaky), api_key_env="SPIRAL_TEST_KEY", backoff_s=0.01
    )
    state = games.make("TicTacToe-v0", seed=0)
    assert agent.act(state) == "[4]"
    assert len(flaky.bodies) == 3  # type: ignore[attr-defined]
    assert flaky.auth == ["Bearer sk-secret-value"] * 3  # type: ignore[attr-defined]
    body = flaky.bodies[-1]  # type: ignore[attr-defined]
    assert body["model"] == "flaky-model" and body["n"] == 1
    assert body["messages"][-1]["role"] == "user"
    assert "Observation:" in body["messages"][-1]["content"]
    stats = agent.stats()
    assert (stats["calls"], stats["failures"], stats["retries"]) == (1, 0, 2)
    assert (stats["prompt_tokens"], stats["completion_tokens"]) == (11, 3)
    assert "sk-secret-value" not in repr(agent) + json.dumps(stats)


def test_429_is_retried_but_400_stops_at_once(flaky: ThreadingHTTPServer) -> None:
    flaky.fail_status = 429  # type: ignore[attr-defined]
    agent = make_api_agent("m", base_url=_url(flaky), backoff_s=0.01, max_retries=3)
    state = games.make("TicTacToe-v0", seed=0)
    assert agent.take_turns([state], seed=1)[0].move == "[4]"
    flaky.bodies.clear()  # type: ignore[attr-defined]
    flaky.fail_status = 400  # type: ignore[attr-defined]
    with pytest.raises(ApiCallError) as refused:
        agent.take_turns([state], seed=2)
    assert len(flaky.bodies) == 1  # type: ignore[attr-defined]  # a 400 is final
    said = str(refused.value)
    assert "api:m" in said and "refused the request: HTTP 400" in said and "\n" not in said
    assert agent.stats()["failures"] == 1


def test_a_408_is_retried_like_a_blip(flaky: ThreadingHTTPServer) -> None:
    flaky.fail_status = 408  # type: ignore[attr-defined]  # a proxy's request timeout
    agent = make_api_agent("m", base_url=_url(flaky), backoff_s=0.01)
    assert agent.take_turns([games.make("TicTacToe-v0", seed=0)], seed=1)[0].move == "[4]"
    assert agent.stats()["retries"] == 2 and agent.stats()["failures"] == 0


@pytest.mark.parametrize(
    "usage",
    [
        None,
        "lots",
        [],
        {"prompt_tokens": "11"},
        {"prompt_tokens": None},
        {"prompt_tokens": 1e300},
        {"prompt_tokens": -5},
        {"completion_tokens": True},
    ],  # fmt: skip
)
def test_a_malformed_usage_counts_nothing_and_the_move_stands(
    flaky: ThreadingHTTPServer, usage: object
) -> None:
    flaky.failures, flaky.usage = 0, usage  # type: ignore[attr-defined]
    agent = make_api_agent("m", base_url=_url(flaky))
    assert agent.take_turns([games.make("TicTacToe-v0", seed=0)], seed=1)[0].move == "[4]"
    assert agent.stats()["prompt_tokens"] == agent.stats()["completion_tokens"] == 0


@pytest.mark.parametrize("content", [None, 7, ["[4]"]])
def test_a_reply_without_text_stops_the_evaluation_in_one_line_not_as_a_move(
    flaky: ThreadingHTTPServer, content: object
) -> None:
    """A null content (a refusal, a tool call) is no move: counting it as the API
    model's invalid move would hand the other seat every game."""
    flaky.failures, flaky.content = 0, content  # type: ignore[attr-defined]
    agent = make_api_agent("m", base_url=_url(flaky))
    with pytest.raises(ApiCallError, match="not text") as stopped:
        agent.take_turns([games.make("TicTacToe-v0", seed=0)], seed=1)
    assert "\n" not in str(stopped.value)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The backoff waits, recorded instead of slept."""
    waited: list[float] = []
    monkeypatch.setattr(api_agent.time, "sleep", waited.append)
    return waited


def test_an_unreachable_api_opponent_stops_the_evaluation_in_one_line(
    sleeps: list[float],
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    agent = make_api_agent("gone", base_url=dead)  # the default attempts and backoff
    with pytest.raises(ApiCallError) as stopped:
        evaluate(
            agents.make("random", seed=3),
            {"api:gone": agent},
            ["TicTacToe-v0"],
            2,
            invalid_policy("spiral"),
        )
    said = str(stopped.value)
    assert isinstance(stopped.value, SpiralError) and "\n" not in said
    assert f"api:gone at {dead} did not answer after 4 attempt(s)" in said
    assert "ConnectError" in said and "check api_base_url" in said
    assert sleeps == [0.5, 1.0, 2.0]  # a few attempts, a short total
    stats = agent.stats()
    assert (stats["calls"], stats["failures"], stats["retries"]) == (1, 1, 3)


def test_the_backoff_is_bounded_whatever_the_server_asks() -> None:
    agent = make_api_agent("m", base_url="http://127.0.0.1:1/v1")
    assert agent._delay(10, None) == api_agent.MAX_BACKOFF_S
    assert agent._delay(0, "3600") == api_agent.MAX_BACKOFF_S  # Retry-After: an hour
    assert agent._delay(1, "Wed, 21 Oct 2026 07:28:00 GMT") == 2 * api_agent.BACKOFF_S


def test_dropped_connections_that_then_get_replies_count_normally(sleeps: list[float]) -> None:
    with chat_server("I play [4]", drops=2) as server:
        agent = make_api_agent("blip", base_url=server.url)
        turn = agent.take_turns([games.make("TicTacToe-v0", seed=0)], seed=1)[0]
    assert turn.move == "[4]" and server.requests == 3
    assert sleeps == [0.5, 1.0]
    stats = agent.stats()
    assert (stats["calls"], stats["failures"], stats["retries"]) == (1, 0, 2)
    assert "RemoteProtocolError" in stats["last_errors"][-1]


def test_a_reply_that_is_no_legal_move_loses_the_api_model_its_game() -> None:
    """A reply is a move: an unparseable one is the API model's invalid move, counted as
    the opponent's invalid game, not as an API failure."""
    with chat_server("I would rather not play") as server:
        agent = make_api_agent("shy", base_url=server.url)
        results, episodes = evaluate(
            agents.make("random", seed=3),
            {"api:shy": agent},
            ["TicTacToe-v0"],
            2,
            invalid_policy("spiral"),
        )
    assert all(ep.outcome == "invalid" for ep in episodes) and len(episodes) == 4
    assert all(ep.agents[ep.offender] == "api:shy" for ep in episodes)
    assert sum(r.opponent_invalid for r in results) == 4
    assert agent.stats()["failures"] == 0 and server.requests == 4


def test_messages_and_refused_format() -> None:
    state = games.make("KuhnPokerSingle-v0", seed=0)
    plain = chat_messages(state, PromptSpec(answer_format="bracket"))
    assert [m["role"] for m in plain] == ["user"]
    with_rules = chat_messages(state, PromptSpec(system_rules=True))
    assert [m["role"] for m in with_rules] == ["system", "user"]
    assert with_rules[0]["content"] and with_rules[0]["content"] not in with_rules[1]["content"]
    with pytest.raises(ValueError, match="constrained"):
        make_api_agent("m", answer_format="constrained")


def test_full_evaluation_against_spiral_serve() -> None:
    sampler = load_sampler(resolve_source(str(tiny_model_dir())), device="cpu")
    with running_server(create_app(sampler, "tiny")) as url:
        api = make_api_agent("tiny", base_url=url, max_tokens=8, temperature=1.0)
        assert isinstance(api, ApiAgent)
        candidate = agents.make("random", seed=5)
        results, episodes = evaluate(
            candidate, {"api:tiny": api}, ["TicTacToe-v0"], 3, invalid_policy("spiral"), seed=1
        )
    assert {(r.opponent, r.seat) for r in results} == {("api:tiny", 0), ("api:tiny", 1)}
    assert sum(r.games for r in results) == len(episodes) == 6
    stats = api.stats()
    assert stats["failures"] == 0  # the server answered every call
    api_turns = [t for ep in episodes for t in ep.turns if t.agent == "api:tiny"]
    assert stats["calls"] == len(api_turns) > 0
    assert stats["completion_tokens"] > 0
    for turn in api_turns:
        assert turn.completion is None
        failure = turn.parse.failure if turn.parse else None
        assert failure is None or not failure.detail.startswith("api_error")
    for ep in episodes:  # every game ended by the rules or by a (model) invalid move
        assert ep.outcome in ("win", "draw", "invalid")


def test_a_retry_after_of_any_value_waits_within_the_backoff_range() -> None:
    agent = make_api_agent("m", base_url="http://127.0.0.1:1/v1")
    cap = agent.settings.max_backoff_s
    for sent, waits in (("-1", 0.0), ("nan", None), ("inf", None), ("1e9", cap), ("2", 2.0)):
        got = agent._delay(0, sent)
        assert 0.0 <= got <= cap
        if waits is not None:
            assert got == waits
