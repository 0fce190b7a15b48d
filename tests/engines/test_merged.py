"""`merged`: sampling with the LoRA adapter merged into the base weights computes the
same function as PEFT's adapter path, follows the adapter's updates, puts every weight
and flag back, and stands aside where it cannot merge."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from spiral.engines.base import SamplingParams
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.learner import TorchLearner
from spiral.engines.torch.loading import load_model_and_tokenizer
from spiral.engines.torch.merged import _SLOT, MAX_MERGED, merged
from spiral.engines.torch.sampler import TorchSampler
from spiral.engines.torch.snapshots import TRAINED, drop_snapshot, take_snapshot

from .conftest import (
    PROMPT_TEXTS,
    agreement_constraints,
    chat_prompts,
    is_loss,
    max_gap,
    to_datum,
)


def _model(path: Path, dtype: str = "float32"):
    torch.manual_seed(0)
    model, tok = load_model_and_tokenizer(ModelConfig(str(path), lora_rank=4, dtype=dtype))
    torch.manual_seed(1)
    for name, param in model.named_parameters():
        if "lora_B" in name:  # PEFT starts B at zero; make the adapter matter
            torch.nn.init.normal_(param, std=0.2)
    model.eval()
    ids = torch.tensor([tok("your move [4] and then the board")["input_ids"]])
    return model, tok, ids


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def _base_weights(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "base_layer" in n}


def test_merged_computes_the_adapter_path_and_restores_everything(tiny_llama: Path) -> None:
    model, _, ids = _model(tiny_llama)
    plain = _logits(model, ids)
    before = _base_weights(model)
    grads = {n: p.requires_grad for n, p in model.named_parameters()}
    with merged(model, TRAINED) as on:
        assert on
        inside = _logits(model, ids)
        # the base weights really are the merged ones inside the block
        assert any(
            not torch.equal(p, before[n]) for n, p in model.named_parameters() if n in before
        )
    torch.testing.assert_close(inside, plain, rtol=1e-5, atol=1e-5)
    after = _base_weights(model)
    assert all(torch.equal(after[n], w) for n, w in before.items())
    assert {n: p.requires_grad for n, p in model.named_parameters()} == grads
    assert torch.equal(_logits(model, ids), plain)  # the adapters are on again


def test_the_merge_follows_updates_of_the_adapter(tiny_llama: Path) -> None:
    model, _, ids = _model(tiny_llama)
    with merged(model, TRAINED):
        first = _logits(model, ids)
    with torch.no_grad():  # an optimizer's in-place update
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.mul_(-1.5)
    with merged(model, TRAINED):
        second = _logits(model, ids)
    torch.testing.assert_close(second, _logits(model, ids), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(first, second)


def test_pool_members_merge_their_own_adapter_and_the_cache_is_bounded(
    tiny_llama: Path,
) -> None:
    model, _, ids = _model(tiny_llama)
    for k in range(3):
        take_snapshot(model, f"m{k}")
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_B" in name and TRAINED in name:
                    param.add_(0.1)
    grads = {n: p.requires_grad for n, p in model.named_parameters()}
    for name in ("m0", "m1", "m2"):
        model.set_adapter(name)
        plain = _logits(model, ids)
        with merged(model, name):
            torch.testing.assert_close(_logits(model, ids), plain, rtol=1e-5, atol=1e-5)
        model.set_adapter(TRAINED)
    assert list(model.__dict__[_SLOT]) == ["m1", "m2"][-MAX_MERGED:]
    assert {n: p.requires_grad for n, p in model.named_parameters()} == grads
    drop_snapshot(model, "m2")
    assert "m2" not in model.__dict__[_SLOT]


@pytest.mark.usefixtures("half_precision")
def test_bf16_merge_is_within_rounding_of_the_adapter_path(tiny_llama: Path) -> None:
    model, _, ids = _model(tiny_llama, "bfloat16")
    plain = _logits(model, ids)
    with merged(model, TRAINED):
        inside = _logits(model, ids)
    # bf16 logits of magnitude ~2 are spaced 0.0156 apart: a few steps of rounding
    assert (inside - plain).abs().max() < 0.1


# PEFT reads transformers' deprecated name when it wraps a model (silenced in the loader).
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_stands_aside_without_lora_or_for_dora(tiny_llama: Path) -> None:
    model, _ = load_model_and_tokenizer(ModelConfig(str(tiny_llama), lora_rank=0))
    with merged(model, TRAINED) as on:
        assert not on
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(str(tiny_llama))
    dora = get_peft_model(base, LoraConfig(r=4, target_modules="all-linear", use_dora=True))
    with merged(dora, "default") as on:
        assert not on
    lora, _, _ = _model(tiny_llama)
    with merged(lora, TRAINED, enabled=False) as on:
        assert not on


@pytest.mark.parametrize("merge", [True, False])
def test_sampler_with_and_without_merge_agrees_with_the_learner(
    tiny_llama: Path, merge: bool
) -> None:
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4, seed=0))
    with torch.no_grad():
        for name, param in learner.model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(param, std=0.2)
    tok = learner.tokenizer
    prompts = chat_prompts(tok, PROMPT_TEXTS)
    sampler = TorchSampler(learner.model, tok, merge_lora=merge)
    params = SamplingParams(max_tokens=12, temperature=0.8, seed=4)
    learner.temperature = 0.8
    completions = sampler.sample(prompts, params, agreement_constraints(tok))
    datums = [to_datum(p, c) for p, c in zip(prompts, completions, strict=True)]
    assert max_gap(learner, datums) < 1e-4


def test_the_learner_frees_the_trained_merge_when_it_learns(tiny_llama: Path) -> None:
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4, seed=0))
    tok = learner.tokenizer
    prompts = chat_prompts(tok, PROMPT_TEXTS)
    completions = learner.sampler().sample(prompts, SamplingParams(max_tokens=4, seed=1))
    assert TRAINED in learner.model.__dict__[_SLOT]
    datums = [to_datum(p, c) for p, c in zip(prompts, completions, strict=True)]
    learner.forward_backward(datums, is_loss)
    assert TRAINED not in learner.model.__dict__[_SLOT]
