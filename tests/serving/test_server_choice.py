"""`spiral serve` with vLLM's choice extension: the official openai client, asking the
running server with `guided_choice` (or `structured_outputs`), gets only listed replies,
so an outside harness keeps a served model to the legal moves of a TextArena game."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from evaluation_cli import running_server, tiny_model_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


SPECIAL = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "<unk>"]


def test_choices_spelled_like_special_tokens_are_replied_as_written(
    served: tuple[str, object],
) -> None:
    url, _ = served
    for choices in (["<|im_start|>", "<|endoftext|>"], ["<|im_end|>", "a<|im_end|>"]):
        for seed in range(3):
            body = {"model": "x", "messages": [{"role": "user", "content": "pick"}],
                    "guided_choice": choices, "seed": seed}  # fmt: skip
            reply = httpx.post(f"{url}/chat/completions", json=body, timeout=60)
            assert reply.status_code == 200, reply.text
            assert reply.json()["choices"][0]["message"]["content"] in choices


choice_texts = st.one_of(
    st.sampled_from([*SPECIAL, "", " ", "[1]", "[1] ", "é", "e\u0301", "\u00a0", "\x00"]),
    st.text(max_size=8),
    st.builds("".join, st.lists(st.sampled_from([*SPECIAL, "[", "1", "]", " "]), max_size=4)),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(choices=st.lists(choice_texts, min_size=1, max_size=5), seed=st.integers(0, 9))
def test_a_choice_reply_is_exactly_one_choice_or_a_400_naming_the_choice(
    served: tuple[str, object], choices: list[str], seed: int
) -> None:
    url, _ = served
    body = {"model": "x", "messages": [{"role": "user", "content": "pick"}],
            "guided_choice": choices, "seed": seed, "max_tokens": 1}  # fmt: skip
    reply = httpx.post(f"{url}/chat/completions", json=body, timeout=60)
    if reply.status_code == 200:
        assert reply.json()["choices"][0]["message"]["content"] in choices
        assert reply.json()["choices"][0]["finish_reason"] == "stop"
        return
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "guided_choice"
    assert any(repr(c) in error["message"] for c in choices), error["message"]
