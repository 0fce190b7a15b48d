"""`spiral serve` with vLLM's choice extension: the official openai client, asking the
running server with `guided_choice` (or `structured_outputs`), gets only listed replies,
so an outside harness keeps a served model to the legal moves of a TextArena game."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from evaluation_cli import running_server, tiny_model_dir

from spiral import games
from spiral.agents.model_agent import load_sampler, resolve_source
from spiral.serving.openai_api import choice_constraint
from spiral.serving.server import create_app


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, object]]:
    sampler = load_sampler(resolve_source(str(tiny_model_dir())), device="cpu")
    with running_server(create_app(sampler, "tiny-model")) as url:
        yield url, sampler.tokenizer


def test_textarena_tictactoe_through_the_openai_client_has_no_invalid_move(
    served: tuple[str, object],
) -> None:
    pytest.importorskip("textarena")
    from openai import OpenAI

    url, _ = served
    client = OpenAI(base_url=url, api_key="unused", max_retries=0)
    moves = 0
    for seed in range(2):
        state = games.make("textarena:TicTacToe-v0", seed=seed)
        while not state.is_terminal():
            seat = state.current_player()
            legal = state.legal_actions()
            reply = client.chat.completions.create(
                model="tiny-model",
                messages=[{"role": "user", "content": state.observation(seat)}],
                max_tokens=8,
                temperature=1.0,
                seed=seed * 100 + moves,
                extra_body={"guided_choice": legal},
            )
            answer = reply.choices[0].message.content
            assert answer in legal, (answer, legal)
            assert reply.choices[0].finish_reason == "stop"
            state.apply_action(answer)  # raises IllegalMoveError on an invalid move
            moves += 1
    assert moves >= 10  # two whole games, every move legal


def test_structured_outputs_choice_and_a_choice_that_is_a_prefix_of_another(
    served: tuple[str, object],
) -> None:
    url, tokenizer = served
    choices = ["[bet]", "[bet] twice"]  # the first one's tokens begin the second's
    for seed in range(6):
        body = {
            "model": "x",
            "messages": [{"role": "user", "content": "your action?"}],
            "max_tokens": 1,  # raised to the longest choice
            "seed": seed,
            "structured_outputs": {"choice": choices},
        }
        reply = httpx.post(f"{url}/chat/completions", json=body).json()
        assert reply["choices"][0]["message"]["content"] in choices
        assert reply["choices"][0]["finish_reason"] == "stop"
    # Prefix-related choices end with the eos token, so "[bet]" is a whole reply.
    constraint = choice_constraint(choices, tokenizer)
    eos = tokenizer.eos_token_id  # type: ignore[attr-defined]
    assert all(c[-1] == eos for c in constraint.choices)


def test_choice_requests_that_cannot_be_served_are_400s(served: tuple[str, object]) -> None:
    url, _ = served
    base = {"model": "x", "messages": [{"role": "user", "content": "hi"}]}
    cases = [
        ({"guided_choice": []}, "empty"),
        ({"guided_choice": ["[1]", "[1]"]}, "twice"),
        ({"guided_regex": r"\[\d\]"}, "guided_regex is not supported"),
        ({"structured_outputs": {"json": {}}}, "only 'choice'"),
    ]
    for extra, message in cases:
        reply = httpx.post(f"{url}/chat/completions", json={**base, **extra})
        assert reply.status_code == 400, extra
        assert message in reply.json()["error"]["message"]


def test_choice_tokens_are_each_choice_alone(served: tuple[str, object]) -> None:
    _, tokenizer = served
    constraint = choice_constraint(["[4]", "[5]"], tokenizer)
    encode = tokenizer.encode  # type: ignore[attr-defined]
    assert constraint.choices == (
        tuple(encode("[4]", add_special_tokens=False)),
        tuple(encode("[5]", add_special_tokens=False)),
    )
    assert constraint.marker == () and constraint.think_budget == 0
