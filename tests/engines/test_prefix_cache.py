"""The prefix cache across sampler calls (spiral.engines.torch.kv_cache): the radix tree's
rules on hand-made tensors, then on a tiny real model: the same tokens and log-probs as
without it, history computed once, per-adapter keys, and never stale after an update."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from spiral.engines.base import SamplingParams, StaleSamplerError
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.kv_cache import PrefixCache
from spiral.engines.torch.learner import TorchLearner
from spiral.engines.torch.sampler import TorchSampler

from .conftest import chat_prompts, is_loss, move_constraint
from .test_learner import _datums


def _kv(tokens: list[int]) -> torch.Tensor:
    """Fake KV [layers=2, 2, heads=1, n, dim=1] whose values are the token ids."""
    t = torch.tensor(tokens, dtype=torch.float32).view(1, 1, 1, -1, 1)
    return t.expand(2, 2, 1, len(tokens), 1).clone()


def test_tree_matches_splits_and_keeps_per_adapter() -> None:
    cache = PrefixCache(budget_bytes=10**6)
    cache.insert("a", [1, 2, 3, 4], _kv([1, 2, 3, 4]), start=0)
    assert cache.match("a", [1, 2, 3, 4, 5]).length == 4
    assert cache.match("a", [1, 2, 9]).length == 2
    assert cache.match("b", [1, 2, 3]).length == 0  # another adapter's KV is not this one's
    # A prompt that parts inside an edge splits it; both branches keep their KV.
    cache.insert("a", [1, 2, 7, 8], _kv([7, 8]), start=2)
    for prompt in ([1, 2, 3, 4], [1, 2, 7, 8]):
        found = cache.match("a", prompt)
        assert found.length == 4
        assert cache.gather(found)[0, 0, 0, :, 0].tolist() == prompt
    assert cache.gather(cache.match("a", [1, 2, 7]))[1, 1, 0, :, 0].tolist() == [1, 2, 7]
    # Held bytes: 6 distinct tokens x 2 layers x K and V x 4 bytes.
    assert cache.held_bytes == 6 * 2 * 2 * 4
    # Counting: 5 + 3 + 3 + 4 + 4 + 3 tokens looked up above, 4 + 2 + 0 + 4 + 4 + 3 found.
    assert (cache.lookup_tokens, cache.hit_tokens) == (22, 17)
    # A tail whose head is not cached (evicted meanwhile) is not inserted.
    cache.insert("a", [5, 6, 7], _kv([7]), start=2)
    assert cache.match("a", [5, 6, 7]).length == 0


def test_least_recently_used_leaves_leave_first_under_the_budget() -> None:
    cache = PrefixCache(budget_bytes=4 * 16)  # room for 4 tokens of this fake KV
    cache.insert("a", [1, 2, 3], _kv([1, 2, 3]), start=0)
    cache.insert("a", [1, 2, 4], _kv([4]), start=2)
    cache.match("a", [1, 2, 3])  # [3] is now more recent than [4]
    cache.insert("a", [1, 2, 5], _kv([5]), start=2)  # 5 tokens: the LRU leaf [4] goes
    assert cache.held_bytes == 4 * 16 and cache.evicted_bytes == 16
    assert cache.match("a", [1, 2, 4]).length == 2
    assert cache.match("a", [1, 2, 3]).length == 3
    assert cache.match("a", [1, 2, 5]).length == 3
    off = PrefixCache(budget_bytes=0)  # a zero budget holds nothing
    off.insert("a", [1, 2], _kv([1, 2]), start=0)
    assert off.match("a", [1, 2]).length == 0 and off.held_bytes == 0


def _games(tokenizer: object, turns: int) -> list[list[list[int]]]:
    """Prompts of 3 'games' whose history grows each turn (full-history observations)."""
    games = []
    for g in range(3):
        history, prompts = f"Game {g}. Rules: place marks, three in a row wins.", []
        for t in range(turns):
            history += f" Player {t % 2} placed {(g + 3 * t) % 9}."
            prompts.append(history + " Your move.")
        games.append(chat_prompts(tokenizer, prompts))
    return games


@pytest.mark.parametrize("answers", ["free", "constrained"])
def test_cached_calls_sample_what_uncached_calls_do(tiny_llama: Path, answers: str) -> None:
    learner = TorchLearner(ModelConfig(model=str(tiny_llama), lora_rank=4, device="cpu"))
    tok = learner.tokenizer
    plain = learner.sampler()
    cached = TorchSampler(learner.model, tok, prefix_cache_mb=64)
    games = _games(tok, turns=4)
    for turn in range(4):
        prompts = [game[turn] for game in games]
        cons = [move_constraint(tok, 0)] * 3 if answers == "constrained" else None
        params = SamplingParams(max_tokens=6, temperature=1.0, seed=turn)
        a, b = plain.sample(prompts, params, cons), cached.sample(prompts, params, cons)
        assert [c.tokens for c in a] == [c.tokens for c in b]
        for x, y in zip(a, b, strict=True):
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-5)
        if turn > 0:  # each game's earlier turns came from the cache
            assert cached.last_stats["prefill_tokens"] < plain.last_stats["prefill_tokens"] / 2
    counters = cached.counters()
    assert counters["perf/prefix_cache_hit_rate"] > 0.5
    assert counters["perf/prefix_cache_held_mb"] > 0
    assert counters["perf/prefill_saved_fraction"] > plain.counters()["perf/prefill_saved_fraction"]


def test_members_and_policy_are_cached_apart(tiny_llama: Path, tmp_path: Path) -> None:
    learner = TorchLearner(ModelConfig(model=str(tiny_llama), lora_rank=4, device="cpu"))
    datums = _datums(learner)
    learner.forward_backward(datums, is_loss)
    learner.optim_step(1e-2)  # the trained adapter now differs from the snapshot below
    learner.frozen.freeze("step_000001", tmp_path / "m")
    learner.forward_backward(datums, is_loss)
    learner.optim_step(1e-2)
    tok = learner.tokenizer
    games = _games(tok, turns=3)
    plain = learner.sampler()
    cached = TorchSampler(learner.model, tok, prefix_cache_mb=64)
    names = ["default", "step_000001", "default"]
    for turn in range(3):
        # The same prompts for the policy and the member in one call: their KV differ.
        prompts = [games[0][turn], games[0][turn], games[1][turn]]
        params = SamplingParams(max_tokens=5, seed=turn)
        a = plain.sample(prompts, params, adapters=names)
        b = cached.sample(prompts, params, adapters=names)
        assert [c.tokens for c in a] == [c.tokens for c in b]
        for x, y in zip(a, b, strict=True):
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-5)


def test_no_stale_kv_after_an_update(tiny_llama: Path) -> None:
    learner = TorchLearner(
        ModelConfig(model=str(tiny_llama), lora_rank=4, device="cpu"), prefix_cache_mb=64
    )
    prompts = [g[0] for g in _games(learner.tokenizer, turns=1)]
    params = SamplingParams(max_tokens=4, seed=0)
    before = learner.sampler()
    before.sample(prompts, params)
    assert before.prefix_cache is not None and before.prefix_cache.held_bytes > 0
    learner.forward_backward(_datums(learner), is_loss)
    learner.optim_step(1e-2)
    with pytest.raises(StaleSamplerError):  # the old cache can no longer be read
        before.sample(prompts, params)
    after = learner.sampler()
    assert after.prefix_cache is not None and after.prefix_cache.held_bytes == 0
    fresh = TorchSampler(learner.model, learner.tokenizer)  # the new weights, no cache
    x, y = after.sample(prompts, params), fresh.sample(prompts, params)
    assert [v for c in x for v in c.logprobs] == pytest.approx(
        [v for c in y for v in c.logprobs], abs=1e-5
    )
