"""RunningBatch: rows that join and leave between tokens draw what `sample` draws alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spiral.engines.base import SamplingParams
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.loading import load_model_and_tokenizer
from spiral.engines.torch.sampler import TorchSampler

from .conftest import PROMPT_TEXTS, chat_prompts, move_constraint


@pytest.fixture(scope="module", params=[True, False], ids=["packed", "model-forward"])
def sampler(request: Any, tiny_llama: Path) -> TorchSampler:
    model, tokenizer = load_model_and_tokenizer(ModelConfig(str(tiny_llama), lora_rank=0))
    return TorchSampler(model, tokenizer, packed_decode=request.param)


def _drain(batch: Any, joins: dict[int, list[tuple[Any, ...]]]) -> dict[Any, Any]:
    """Step `batch` until empty, joining `joins[k]` (prompt, params, constraint, owner)
    before step k; the completions by owner."""
    done: dict[Any, Any] = {}
    step = 0
    while len(batch) or any(k >= step for k in joins):
        for prompt, params, constraint, owner in joins.get(step, []):
            batch.join([prompt], [params], [constraint], [owner])
        for row in batch.step():
            done[row.owner] = batch.completion(row)
        step += 1
    return done


def test_rows_joining_mid_decode_draw_what_they_draw_alone(sampler: TorchSampler) -> None:
    prompts = chat_prompts(sampler.tokenizer, PROMPT_TEXTS)
    choice = move_constraint(sampler.tokenizer, 3)
    asks = [  # (prompt, params, constraint): every row under its own parameters
        (prompts[0], SamplingParams(max_tokens=30, temperature=0)),
        (prompts[1], SamplingParams(max_tokens=9, temperature=1.0, seed=4)),
        (prompts[2], SamplingParams(max_tokens=20, temperature=0.7, top_p=0.8, seed=5)),
        (prompts[3], SamplingParams(max_tokens=12, temperature=1.0, seed=6), choice),
        (prompts[1], SamplingParams(max_tokens=25, temperature=0)),
    ]
    alone = {
        k: sampler.sample([a[0]], a[1], [a[2] if len(a) > 2 else None])[0]
        for k, a in enumerate(asks)
    }
    joins: dict[int, list[tuple[Any, ...]]] = {}
    for k, a in enumerate(asks):  # joined at steps 0, 0, 3, 3, 7
        joins.setdefault([0, 0, 3, 3, 7][k], []).append(
            (a[0], a[1], a[2] if len(a) > 2 else None, k)
        )
    together = _drain(sampler.running_batch(), joins)
    assert sorted(together) == list(range(len(asks)))
    for k, reply in together.items():
        assert reply.tokens == alone[k].tokens, k
        assert reply.stop_reason == alone[k].stop_reason
        assert reply.text == alone[k].text
        assert reply.answer_start == alone[k].answer_start
        assert (
            max(abs(a - b) for a, b in zip(reply.logprobs, alone[k].logprobs, strict=True)) < 1e-4
        )


def test_a_row_that_leaves_frees_its_columns_and_the_others_go_on(
    sampler: TorchSampler,
) -> None:
    prompts = chat_prompts(sampler.tokenizer, PROMPT_TEXTS)
    greedy = SamplingParams(max_tokens=15, temperature=0)
    alone = sampler.sample([prompts[2]], greedy)[0]
    batch = sampler.running_batch()
    batch.join([prompts[1]], [SamplingParams(max_tokens=200, temperature=0)], [None], ["long"])
    batch.step()
    batch.join([prompts[2]], [greedy], [None], ["short"])
    wide = _width(batch)
    batch.leave(["long"])  # its client left
    assert [row.owner for row in batch.rows] == ["short"]
    assert _width(batch) < wide  # the long prompt's columns are gone
    done = _drain(batch, {})
    assert done["short"].tokens == alone.tokens


def test_stop_strings_and_lengths_are_each_rows_own(sampler: TorchSampler) -> None:
    prompt = chat_prompts(sampler.tokenizer, PROMPT_TEXTS)[0]
    free = sampler.sample([prompt], SamplingParams(max_tokens=12, temperature=0))[0]
    stop = free.text[3:5]  # a stop string the greedy reply meets
    stopped = SamplingParams(max_tokens=12, temperature=0, stop=(stop,))
    joins = {0: [(prompt, stopped, None, "stop"),
                 (prompt, SamplingParams(max_tokens=2, temperature=0), None, "two")]}  # fmt: skip
    done = _drain(sampler.running_batch(), joins)
    assert done["stop"].stop_reason == "stop" and stop in done["stop"].text
    assert done["stop"].tokens == sampler.sample([prompt], stopped)[0].tokens
    assert done["two"].tokens == free.tokens[:2] and done["two"].stop_reason == "length"


def _width(batch: Any) -> int:
    decoder = batch._decoder
    return int(decoder.length if hasattr(decoder, "length") else decoder.mask_BK.shape[1])
