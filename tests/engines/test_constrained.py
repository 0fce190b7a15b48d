"""Token trie and constrained sampling: only legal choices, forced markers, answer_start."""

from __future__ import annotations

from pathlib import Path

import pytest

from spiral.engines.base import SamplingParams
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.constrained import TokenTrie, answer_masks
from spiral.engines.torch.loading import load_model_and_tokenizer
from spiral.engines.torch.sampler import TorchSampler
from spiral.types import AnswerConstraint

from .conftest import PROMPT_TEXTS, chat_prompts, move_constraint


def test_trie_allowed_and_complete() -> None:
    trie = TokenTrie([(1, 2, 3), (1, 4), (5,)])
    assert trie.allowed(()) == (1, 5)
    assert trie.allowed((1,)) == (2, 4)
    assert trie.allowed((1, 2)) == (3,)
    assert trie.allowed((9,)) == ()
    assert trie.is_complete((1, 4)) and trie.is_complete((5,))
    assert not trie.is_complete((1,))


def test_trie_rejects_bad_choices() -> None:
    with pytest.raises(ValueError, match="prefix-free"):
        TokenTrie([(1, 2), (1, 2, 3)])
    with pytest.raises(ValueError, match="empty"):
        TokenTrie([])
    with pytest.raises(ValueError, match="empty sequence"):
        TokenTrie([()])


def test_answer_masks_checks_layout() -> None:
    c = AnswerConstraint(choices=((7, 8), (7, 9)), marker=(4, 5), think_budget=2)
    targets = (1, 2, 4, 5, 7, 9)
    forced, masks = answer_masks(c, targets, constraint_start=4)
    assert forced == [2, 3]
    assert masks == [(4, (7,)), (5, (8, 9))]
    with pytest.raises(ValueError, match="marker"):
        answer_masks(c, targets, constraint_start=3)
    with pytest.raises(ValueError, match="not a legal"):
        answer_masks(c, (1, 2, 4, 5, 8, 9), constraint_start=4)


@pytest.fixture(scope="module")
def sampler(tiny_llama: Path) -> TorchSampler:
    model, tokenizer = load_model_and_tokenizer(ModelConfig(str(tiny_llama), lora_rank=0))
    return TorchSampler(model, tokenizer)


@pytest.mark.parametrize("think_budget", [0, 3, 12])
def test_constrained_samples_are_always_legal(sampler: TorchSampler, think_budget: int) -> None:
    tok = sampler.tokenizer
    marker = "\nAnswer: " if think_budget else ""
    constraint = move_constraint(tok, think_budget, marker)
    prompts = chat_prompts(tok, PROMPT_TEXTS) * 4
    seen: set[tuple[int, ...]] = set()
    for seed in range(3):
        out = sampler.sample(
            prompts, SamplingParams(max_tokens=20, seed=seed), [constraint] * len(prompts)
        )
        for c in out:
            assert c.stop_reason == "stop" and c.constraint == constraint
            assert c.answer_start is not None
            answer = c.tokens[c.answer_start :]
            assert answer in constraint.choices
            seen.add(answer)
            m = len(constraint.marker)
            assert c.tokens[c.answer_start - m : c.answer_start] == constraint.marker
            assert all(lp == 0.0 for lp in c.logprobs[c.answer_start - m : c.answer_start])
            assert c.answer_start - m <= think_budget
            if think_budget == 0:
                assert c.answer_start == 0 and c.tokens == answer
            assert c.text.endswith(tok.decode(list(answer)))
    assert len(seen) > 1  # the answer is sampled, not fixed


def test_mixed_constrained_and_free_rows(sampler: TorchSampler) -> None:
    tok = sampler.tokenizer
    prompts = chat_prompts(tok, PROMPT_TEXTS)
    constraint = move_constraint(tok, 4)
    out = sampler.sample(
        prompts, SamplingParams(max_tokens=15, seed=0), [constraint, None, constraint, None]
    )
    assert out[1].answer_start is None and out[1].constraint is None
    assert out[0].tokens[out[0].answer_start :] in constraint.choices
    assert out[2].tokens[out[2].answer_start :] in constraint.choices


def test_single_choice_is_forced_with_zero_logprob(sampler: TorchSampler) -> None:
    tok = sampler.tokenizer
    only = tuple(tok("[4]")["input_ids"])
    out = sampler.sample(
        chat_prompts(tok, PROMPT_TEXTS[:2]),
        SamplingParams(max_tokens=5, seed=0),
        [AnswerConstraint(choices=(only,))] * 2,
    )
    for c in out:
        assert c.tokens == only and c.logprobs == (0.0,) * len(only)
