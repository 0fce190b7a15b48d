"""TorchLearner: micro-batching invariance, learning signal, checkpoints, staleness."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from spiral.algo.losses import get_loss
from spiral.engines.base import Learner, SamplingParams, StaleSamplerError
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.learner import TorchLearner
from spiral.engines.torch.loading import activation_checkpointing_on
from spiral.types import Datum

from .conftest import PROMPT_TEXTS, chat_prompts, is_loss, move_constraint, to_datum


def _datums(learner: TorchLearner, seed: int = 0) -> list[Datum]:
    tok = learner.tokenizer
    prompts = chat_prompts(tok, PROMPT_TEXTS) * 2
    cons = [None, move_constraint(tok, 3)] * 4
    out = learner.sampler().sample(prompts, SamplingParams(max_tokens=10, seed=seed), cons)
    advantages = [1.0, -1.0, 0.5, 1.0, -0.5, 1.0, 2.0, -1.0]
    return [to_datum(p, c, a) for p, c, a in zip(prompts, out, advantages, strict=True)]


def _grads(learner: TorchLearner) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in learner.model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("rank", [4, 0])
def test_gradient_does_not_depend_on_micro_batching(tiny_llama: Path, rank: int) -> None:
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=rank), micro_batch_tokens=10**6)
    assert isinstance(learner, Learner)
    datums = _datums(learner)
    if rank > 0:  # LoRA B starts at zero, so take one step to make every gradient non-trivial
        learner.forward_backward(datums, is_loss)
        learner.optim_step(1e-2)
        datums = _datums(learner, seed=1)
    one = learner.forward_backward(datums, is_loss)
    whole = _grads(learner)
    learner.model.zero_grad(set_to_none=True)
    # One datum per micro-batch and no shared prefix must give the same gradient as one
    # big micro-batch whose common prompt prefix is computed once (share_prefix=True).
    learner.micro_batch_tokens = 40
    learner.share_prefix = False
    assert len(learner._micro_batches(datums, share_prefix=False)) >= len(datums) - 1
    many = learner.forward_backward(datums, is_loss)
    split = _grads(learner)
    assert set(whole) == set(split) and whole
    for name in whole:
        assert torch.allclose(whole[name], split[name], atol=1e-5), name
    assert abs(one["loss"] - many["loss"]) < 1e-5
    assert one["num_tokens"] == many["num_tokens"] == sum(sum(d.mask) for d in datums)
    # The library loss's diagnostics too: means stay means, and the extremes of the ratio
    # stay extremes (they were once averaged over micro-batches).
    loss = get_loss("importance_sampling")
    datums = [  # off-policy rows, so that the ratio differs between rows
        dataclasses.replace(d, sampler_logprobs=tuple(x + 0.1 * i for x in d.sampler_logprobs))
        for i, d in enumerate(datums)
    ]
    many = learner.forward_backward(datums, loss)
    learner.micro_batch_tokens, learner.share_prefix = 10**6, True
    one = learner.forward_backward(datums, loss)
    assert one.keys() == many.keys() >= {"ratio_min", "ratio_max", "ratio_mean"}
    for key in one:
        assert many[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key


@pytest.mark.parametrize("rank", [4, 0])
def test_gradient_checkpointing_gives_the_same_gradient(tiny_llama: Path, rank: int) -> None:
    """Checkpointed layers recompute activations in the backward pass: the gradient must
    equal the plain learner's (which shares prompt prefixes through the KV cache, a path
    checkpointing cannot take: that learner runs every row whole), and its sampler, which
    runs without gradients, still uses its KV cache (the same tokens as the plain one)."""
    plain = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=rank, seed=0))
    ckpt = TorchLearner(
        ModelConfig(str(tiny_llama), lora_rank=rank, seed=0, gradient_checkpointing=True)
    )
    assert plain.share_prefix and not ckpt.share_prefix
    assert activation_checkpointing_on(ckpt.model)
    datums = _datums(plain)
    prompts = [list(d.input_ids) for d in datums[:2]]
    params = SamplingParams(max_tokens=5, seed=3)
    tokens = [[c.tokens for c in x.sampler().sample(prompts, params)] for x in (ckpt, plain)]
    assert tokens[0] == tokens[1]
    if rank > 0:  # LoRA B starts at zero: one equal step on both makes every gradient count
        for learner in (plain, ckpt):
            learner.forward_backward(datums, is_loss)
            learner.optim_step(1e-2)
        datums = _datums(plain, seed=1)
    a = plain.forward_backward(datums, is_loss)
    b = ckpt.forward_backward(datums, is_loss)
    ga, gb = _grads(plain), _grads(ckpt)
    assert set(ga) == set(gb) and ga
    for name in ga:
        assert torch.allclose(ga[name], gb[name], atol=1e-5), name
    assert abs(a["loss"] - b["loss"]) < 1e-5


def test_checkpointing_cannot_share_prefixes(tiny_llama: Path) -> None:
    """Why the checkpointed learner runs rows whole: forced to share prefixes through the
    KV cache, which transformers drops in a checkpointed training forward, its forward
    fails (the mask covers keys the dropped cache no longer has) or its gradient is
    wrong. If this starts to fail, the guard in TorchLearner can go."""
    plain = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=0, seed=0))
    forced = TorchLearner(
        ModelConfig(str(tiny_llama), lora_rank=0, seed=0, gradient_checkpointing=True)
    )
    forced.share_prefix = True
    datums = _datums(plain)
    plain.forward_backward(datums, is_loss)
    try:
        forced.forward_backward(datums, is_loss)
    except RuntimeError as err:
        assert "size" in str(err)
        return
    ga, gb = _grads(plain), _grads(forced)
    assert any(not torch.allclose(ga[n], gb[n], atol=1e-4) for n in ga)


def test_shared_prefix_packs_more_rows_per_micro_batch(tiny_llama: Path) -> None:
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4))
    rules = "The rules of the game, long and shared by every request. " * 4
    tok = learner.tokenizer
    prompts = chat_prompts(tok, [f"{rules} Turn {i}." for i in range(6)])
    out = learner.sampler().sample(prompts, SamplingParams(max_tokens=6, seed=0))
    datums = [to_datum(p, c, 1.0) for p, c in zip(prompts, out, strict=True)]
    longest = max(len(d.input_ids) for d in datums)
    learner.micro_batch_tokens = 3 * longest
    plain = learner._micro_batches(datums, share_prefix=False)
    shared = learner._micro_batches(datums, share_prefix=True)
    assert len(shared) < len(plain)
    assert sorted(i for c in shared for i in c) == list(range(len(datums)))


def test_steps_raise_logprob_of_positive_advantage(tiny_llama: Path) -> None:
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=8))
    datums = _datums(learner)

    def completion_logp(values: list[list[float]]) -> list[float]:
        return [
            sum(v * m for v, m in zip(vs, d.mask, strict=True))
            for vs, d in zip(values, datums, strict=True)
        ]

    before = completion_logp(learner.logprobs(datums))
    for _ in range(4):
        metrics = learner.forward_backward(datums, is_loss)
        step = learner.optim_step(5e-3)
    assert step["lr"] == 5e-3 and step["grad_norm"] > 0 and learner.version == 4
    assert set(metrics) >= {"loss", "num_tokens", "ratio"}
    after = completion_logp(learner.logprobs(datums))
    sign = [1.0 if d.advantages[-1] > 0 else -1.0 for d in datums]
    gain_pos = sum(a - b for a, b, s in zip(after, before, sign, strict=True) if s > 0)
    gain_neg = sum(a - b for a, b, s in zip(after, before, sign, strict=True) if s < 0)
    assert gain_pos > 0.5 and gain_neg < -0.5


def test_stale_sampler_raises(tiny_llama: Path) -> None:
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4))
    old = learner.sampler()
    datums = _datums(learner)
    learner.forward_backward(datums, is_loss)
    learner.optim_step(1e-3)
    with pytest.raises(StaleSamplerError, match="learner.sampler"):
        old.sample([[1, 2, 3]], SamplingParams(max_tokens=2))
    with pytest.raises(StaleSamplerError):
        old.score([[1, 2]], [[3]])
    fresh = learner.sampler()
    assert fresh.version == 1
    assert len(fresh.sample([[1, 2, 3]], SamplingParams(max_tokens=2, seed=0))) == 1


@pytest.mark.parametrize("rank", [4, 0])
def test_save_load_round_trip(tiny_llama: Path, tmp_path: Path, rank: int) -> None:
    cfg = ModelConfig(str(tiny_llama), lora_rank=rank)
    learner = TorchLearner(cfg)
    learner.temperature = 0.9
    datums = _datums(learner)
    for _ in range(2):
        learner.forward_backward(datums, is_loss)
        learner.optim_step(1e-3)
    learner.save(tmp_path / "ckpt")
    layout = "adapter_model.safetensors" if rank else "model.safetensors"
    assert (tmp_path / "ckpt" / layout).is_file()
    assert (tmp_path / "ckpt" / "tokenizer.json").is_file()
    assert not list((tmp_path / "ckpt").glob("*.bin")) and not list(
        (tmp_path / "ckpt").glob("*.pt")
    )

    restored = TorchLearner(cfg)
    restored.load(tmp_path / "ckpt")
    # The temperature is the run's (its config), not the checkpoint's: load leaves it.
    assert restored.version == 2 and restored.temperature == 1.0
    restored.temperature = 0.9
    assert restored.logprobs(datums) == learner.logprobs(datums)
    a, b = learner._get_optimizer().state_dict(), restored._get_optimizer().state_dict()
    assert a["param_groups"] == b["param_groups"]
    for k in a["state"]:
        for key, value in a["state"][k].items():
            assert torch.equal(value, b["state"][k][key]), key
    # Identical next step from identical state.
    learner.forward_backward(datums, is_loss)
    restored.forward_backward(datums, is_loss)
    learner.optim_step(1e-3)
    restored.optim_step(1e-3)
    assert restored.logprobs(datums) == learner.logprobs(datums)
    # The folder is also a model: ModelConfig(model=<checkpoint>) resumes from it.
    reopened = TorchLearner(ModelConfig(str(tmp_path / "ckpt"), lora_rank=rank))
    reopened.temperature = 0.9
    reopened.load(tmp_path / "ckpt")
    assert reopened.version == 2


def test_load_rejects_the_other_layout(tiny_llama: Path, tmp_path: Path) -> None:
    lora = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4))
    lora.save(tmp_path / "lora")
    full = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=0))
    with pytest.raises(ValueError, match="lora_rank > 0"):
        full.load(tmp_path / "lora")


def test_export_merged_matches_lora(tiny_llama: Path, tmp_path: Path) -> None:
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4))
    datums = _datums(learner)
    for _ in range(2):
        learner.forward_backward(datums, is_loss)
        learner.optim_step(1e-2)
    learner.export(tmp_path / "merged")
    plain = AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged"))
    assert not any("lora" in n for n, _ in plain.named_parameters())
    d = datums[0]
    with torch.no_grad():
        logits = plain(torch.tensor([d.input_ids])).logits[0].float()
    expected = (
        torch.log_softmax(logits, -1).gather(1, torch.tensor(d.target_ids).unsqueeze(1)).squeeze(1)
    )
    assert torch.allclose(torch.tensor(learner.logprobs([d])[0]), expected, atol=1e-4)
    # The live learner still has its adapter and keeps training.
    assert any("lora" in n for n, _ in learner.model.named_parameters())


def test_forward_backward_rejects_empty(tiny_llama: Path) -> None:
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4))
    with pytest.raises(ValueError, match="no datums"):
        learner.forward_backward([], is_loss)


def test_all_masked_out_datums_give_no_gradient(tiny_llama: Path) -> None:
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4))
    d = _datums(learner)[0]
    silent = Datum(
        d.input_ids, d.target_ids, d.sampler_logprobs, d.advantages, (0.0,) * len(d.mask)
    )
    metrics = learner.forward_backward([silent], is_loss)
    assert metrics["num_tokens"] == 0.0 and metrics["loss"] == 0.0
    assert all(float(g.abs().max()) == 0.0 for g in _grads(learner).values())
