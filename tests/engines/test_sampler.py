"""TorchSampler on a tiny real model: exactness, determinism, stop rules, prefix reuse."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from spiral.engines.base import Sampler, SamplingParams
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.draws import draw_inverse_cdf, mask_to_allowed, sample_inverse_cdf
from spiral.engines.torch.loading import load_model_and_tokenizer
from spiral.engines.torch.prefill import common_prefix_len
from spiral.engines.torch.sampler import TorchSampler

from .conftest import PROMPT_TEXTS, chat_prompts


@pytest.fixture(scope="module")
def sampler(tiny_llama: Path) -> TorchSampler:
    model, tokenizer = load_model_and_tokenizer(ModelConfig(str(tiny_llama), lora_rank=0))
    return TorchSampler(model, tokenizer)


def _forward_logprobs(
    s: TorchSampler, prompt: list[int], tokens: tuple[int, ...], t: float
) -> torch.Tensor:
    seq = torch.tensor([list(prompt) + list(tokens)])
    with torch.no_grad():
        logits = s.model(seq).logits[0].float() / t
    logp = torch.log_softmax(logits, dim=-1)[len(prompt) - 1 : -1]
    return logp.gather(1, torch.tensor(tokens).unsqueeze(1)).squeeze(1)


def test_is_a_sampler(sampler: TorchSampler) -> None:
    assert isinstance(sampler, Sampler)


def test_logprobs_match_unpadded_forward(sampler: TorchSampler) -> None:
    prompts = chat_prompts(sampler.tokenizer, PROMPT_TEXTS)
    assert len({len(p) for p in prompts}) == len(prompts)  # padding really happens
    out = sampler.sample(prompts, SamplingParams(max_tokens=12, temperature=0.7, seed=1))
    for prompt, c in zip(prompts, out, strict=True):
        assert len(c.tokens) == len(c.logprobs) > 0
        expected = _forward_logprobs(sampler, prompt, c.tokens, 0.7)
        assert torch.allclose(torch.tensor(c.logprobs), expected, atol=1e-4)
        assert c.text == sampler.tokenizer.decode(list(c.tokens), skip_special_tokens=True)


def test_same_seed_same_output_and_other_seed_differs(sampler: TorchSampler) -> None:
    prompts = chat_prompts(sampler.tokenizer, PROMPT_TEXTS)
    a = sampler.sample(prompts, SamplingParams(max_tokens=10, seed=5))
    b = sampler.sample(prompts, SamplingParams(max_tokens=10, seed=5))
    c = sampler.sample(prompts, SamplingParams(max_tokens=10, seed=6))
    assert [x.tokens for x in a] == [x.tokens for x in b]
    assert [x.tokens for x in a] != [x.tokens for x in c]


def test_chunking_and_prefix_reuse_do_not_change_samples(sampler: TorchSampler) -> None:
    prompts = chat_prompts(sampler.tokenizer, PROMPT_TEXTS) * 2
    params = SamplingParams(max_tokens=10, seed=3)
    reference = sampler.sample(prompts, params)
    assert sampler.last_stats["prefill_tokens"] < sampler.last_stats["prompt_tokens"]
    small = TorchSampler(sampler.model, sampler.tokenizer, max_batch_tokens=40)
    plain = TorchSampler(
        sampler.model, sampler.tokenizer, prefix_reuse=False, share_identical=False
    )
    for other in (small, plain):
        out = other.sample(prompts, params)
        assert [c.tokens for c in out] == [c.tokens for c in reference]
        for x, y in zip(out, reference, strict=True):
            assert max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs, strict=True)) < 1e-4
    assert plain.last_stats["prefill_tokens"] == plain.last_stats["prompt_tokens"]


def test_identical_prompts_are_prefilled_once_and_sampled_per_row(
    sampler: TorchSampler,
) -> None:
    from .conftest import move_constraint

    prompts = chat_prompts(sampler.tokenizer, PROMPT_TEXTS[:2]) * 40
    cons = [move_constraint(sampler.tokenizer, 0, marker="")] * len(prompts)
    params = SamplingParams(max_tokens=10, seed=4)
    grouped = sampler.sample(prompts, params, cons)
    stats = dict(sampler.last_stats)
    apart = TorchSampler(sampler.model, sampler.tokenizer, share_identical=False)
    separate = apart.sample(prompts, params, cons)
    # Same draws row by row (each row keeps its own random stream) and the same log-probs.
    assert [c.tokens for c in grouped] == [c.tokens for c in separate]
    for x, y in zip(grouped, separate, strict=True):
        assert max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs, strict=True)) < 1e-4
    assert len({c.tokens for c in grouped}) > 2  # rows of one prompt really differ
    assert stats["groups"] == 2 and stats["rows"] == 80
    assert stats["prefill_tokens"] < apart.last_stats["prefill_tokens"] / 20
    # A node is a set of rows with one history: never more nodes than legal answers.
    assert stats["decode_tokens"] <= 2 * sum(len(c) for c in cons[0].choices)
    # Rows that drew the same answer got bit-identical log-probs (computed once).
    same = [
        c
        for p, c in zip(prompts, grouped, strict=True)
        if p == prompts[0] and c.tokens == grouped[0].tokens
    ]
    assert len(same) > 1
    assert len({c.logprobs for c in same}) == 1


def test_length_and_stop_strings(sampler: TorchSampler) -> None:
    prompts = chat_prompts(sampler.tokenizer, PROMPT_TEXTS)
    free = sampler.sample(prompts, SamplingParams(max_tokens=30, seed=2))
    assert all(len(c.tokens) <= 30 for c in free)
    assert any(c.stop_reason == "length" and len(c.tokens) == 30 for c in free)
    # Stop on a character that occurs in the free text, so every row can hit it.
    stop = "e"
    out = sampler.sample(prompts, SamplingParams(max_tokens=30, seed=2, stop=(stop,)))
    hit = [c for c in out if c.stop_reason == "stop"]
    assert hit, "no row produced the stop string; pick another"
    for c in hit:
        assert stop in c.text
        assert len(c.tokens) == len(c.logprobs)
        shorter = sampler.tokenizer.decode(list(c.tokens[:-1]), skip_special_tokens=True)
        assert stop not in shorter  # cut at the token that completes the stop string
    for c, f in zip(out, free, strict=True):  # same seed: the stop run is a prefix
        assert c.tokens == f.tokens[: len(c.tokens)]


def test_eos_stops_and_is_kept(tiny_llama: Path) -> None:
    model, tokenizer = load_model_and_tokenizer(ModelConfig(str(tiny_llama), lora_rank=0))
    eos = tokenizer.eos_token_id
    # A real head that makes eos ten nats more likely than anything else, after 2 tokens.
    hidden, vocab = model.config.hidden_size, model.config.vocab_size
    head = torch.nn.Linear(hidden, vocab, bias=True)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
        head.bias[eos] = 10.0
    model.lm_head = head
    s = TorchSampler(model, tokenizer)
    out = s.sample(chat_prompts(tokenizer, PROMPT_TEXTS), SamplingParams(max_tokens=50, seed=0))
    assert all(c.stop_reason == "eos" and c.tokens[-1] == eos for c in out)
    assert all(len(c.tokens) < 50 for c in out)


def test_greedy_and_tiny_top_p_pick_the_mode(sampler: TorchSampler) -> None:
    prompts = chat_prompts(sampler.tokenizer, PROMPT_TEXTS)
    greedy = sampler.sample(prompts, SamplingParams(max_tokens=8, temperature=0.0))
    nucleus = sampler.sample(prompts, SamplingParams(max_tokens=8, top_p=1e-6, seed=9))
    assert [c.tokens for c in greedy] == [c.tokens for c in nucleus]
    for prompt, c in zip(prompts, greedy, strict=True):
        seq = torch.tensor([list(prompt)])
        with torch.no_grad():
            first = int(sampler.model(seq).logits[0, -1].argmax())
        assert c.tokens[0] == first
        # Greedy records log-probs at T = 1.
        assert torch.allclose(
            torch.tensor(c.logprobs), _forward_logprobs(sampler, prompt, c.tokens, 1.0), atol=1e-4
        )


def test_score_matches_forward(sampler: TorchSampler) -> None:
    prompts = chat_prompts(sampler.tokenizer, PROMPT_TEXTS)
    one = prompts[1]
    moves = [sampler.tokenizer(f"[{k}]")["input_ids"] for k in range(9)]
    scores = sampler.score([one] * 9 + prompts, moves + [moves[0], [], moves[3], moves[4]])
    assert scores[10] == []
    for prompt, cont, got in zip(
        [one] * 9 + prompts, moves + [moves[0], [], moves[3], moves[4]], scores, strict=True
    ):
        if cont:
            expected = _forward_logprobs(sampler, prompt, tuple(cont), 1.0)
            assert torch.allclose(torch.tensor(got), expected, atol=1e-4)


def test_bad_inputs_fail_loudly(sampler: TorchSampler) -> None:
    with pytest.raises(ValueError, match="at least one token"):
        sampler.sample([[]], SamplingParams())
    with pytest.raises(ValueError, match="constraints"):
        sampler.sample([[1, 2]], SamplingParams(), constraints=[None, None])


def test_common_prefix_len() -> None:
    assert common_prefix_len([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert common_prefix_len([[5], [6]]) == 0


@pytest.mark.parametrize("think_budget", [None, 0, 3])
def test_nan_weights_stop_sampling_with_a_clear_error(
    tiny_llama: Path, think_budget: int | None
) -> None:
    """A diverged model (NaN weights) used to hang constrained sampling forever: a NaN
    drew a token outside the legal set and the row never finished."""
    from spiral.engines.torch.draws import NonFiniteLogitsError
    from spiral.errors import SpiralError

    from .conftest import move_constraint

    model, tok = load_model_and_tokenizer(ModelConfig(str(tiny_llama), lora_rank=0))
    with torch.no_grad():
        model.get_output_embeddings().weight.fill_(float("nan"))
    sampler = TorchSampler(model, tok)
    prompts = chat_prompts(tok, PROMPT_TEXTS)[:2]
    cons = None if think_budget is None else [move_constraint(tok, think_budget)] * 2
    with pytest.raises(NonFiniteLogitsError, match="NaN or infinite logits") as err:
        sampler.sample(prompts, SamplingParams(max_tokens=5, seed=0), cons)
    assert isinstance(err.value, SpiralError)


def test_score_groups_prompts_and_handles_one_token_prompts(sampler: TorchSampler) -> None:
    """Rows of one prompt share its forward; a one-token prompt has no stem; without
    prefix reuse every row runs whole: all give the plain forward's numbers."""
    prompts = chat_prompts(sampler.tokenizer, PROMPT_TEXTS)
    moves = [sampler.tokenizer(f"[{k}]")["input_ids"] for k in range(3)]
    rows = [p for p in prompts for _ in moves] + [prompts[0][:1]]
    conts = [m for _ in prompts for m in moves] + [moves[2]]
    plain = TorchSampler(sampler.model, sampler.tokenizer, prefix_reuse=False)
    for scorer in (sampler, plain):
        for prompt, cont, got in zip(rows, conts, scorer.score(rows, conts), strict=True):
            expected = _forward_logprobs(sampler, prompt, tuple(cont), 1.0)
            assert torch.allclose(torch.tensor(got), expected, atol=1e-4)


def test_draw_inverse_cdf_hand_worked_with_ragged_rows_and_top_p() -> None:
    # probabilities row 0: [0.1, 0.2, 0.3, 0.4] (cdf 0.1, 0.3, 0.6, 1.0); row 1: [0.5, 0.5, 0, 0]
    logp_BV = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.5, 0.5, 0.0, 0.0]]).log()
    # row 0 serves three rows of one node, row 1 one row (its second column is padding)
    assert sample_inverse_cdf(logp_BV, [[0.05, 0.35, 0.99], [0.7]], 1.0) == [[0, 2, 3], [1]]
    # top_p=0.5 keeps 0.4 and 0.3 of row 0 (sorted 3, 2; cdf 0.4, 0.7 of 0.7 total)
    assert sample_inverse_cdf(logp_BV, [[0.5, 0.6], [0.1]], 0.5) == [[3, 2], [0]]
    drawn_BK = draw_inverse_cdf(logp_BV, [[0.05, 0.35, 0.99], [0.7]], 1.0)
    assert drawn_BK.shape == (2, 3)


def test_mask_to_allowed_keeps_only_each_constrained_rows_tokens() -> None:
    class Allowed:
        def __init__(self, ids: set[int]) -> None:
            self.ids = ids

        def allowed(self) -> set[int]:
            return self.ids

    scaled_BV = torch.zeros(3, 5)
    mask_to_allowed(scaled_BV, [Allowed({1, 3}), None, Allowed({4})])
    inf = float("-inf")
    expected = [[inf, 0, inf, 0, inf], [0, 0, 0, 0, 0], [inf, inf, inf, inf, 0]]
    assert scaled_BV.tolist() == expected
