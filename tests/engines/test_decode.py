"""`decode.py`: the packed decode step computes what the model's own forward computes
(bit for bit in bf16 on a CPU, to rounding in fp32), through rows that branch and end,
for each architecture it takes; it follows weight updates and stands aside where it
would compute something else."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from spiral.engines.base import SamplingParams
from spiral.engines.loading import ModelConfig
from spiral.engines.torch import cpu
from spiral.engines.torch.decode import (
    _SLOT,
    MIN_ROOM_TO_PACK,
    ModelDecoder,
    PackedDecoder,
    drop_packed,
    packed_decoder,
    packed_weights,
)
from spiral.engines.torch.graphs import StaticDecoder
from spiral.engines.torch.learner import TorchLearner
from spiral.engines.torch.loading import load_model_and_tokenizer
from spiral.engines.torch.merged import merged
from spiral.engines.torch.prefill import prefill
from spiral.engines.torch.sampler_rows import eval_mode
from spiral.engines.torch.snapshots import TRAINED
from spiral.testing import make_tiny_model

from .conftest import PROMPT_TEXTS, chat_prompts, is_loss, to_datum


@pytest.fixture(scope="module")
def tiny_qwen2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "qwen2", arch="qwen2")


def loaded(path: Path, dtype: str, lora_rank: int = 0, device: str = "cpu"):
    torch.manual_seed(0)
    cfg = ModelConfig(str(path), lora_rank=lora_rank, dtype=dtype, device=device)
    model, tok = load_model_and_tokenizer(cfg, trained=False)  # a sampler's model
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias") or "lora_B" in name:  # zero at init: make them matter
                param.normal_(std=0.2)
    return model, tok


def run_both(model, tok, steps: int = 6):
    """Logits of the model's decoder and the packed one, fed the same tokens, with a
    branch (row 0 repeated) and an ended row after two steps."""
    prompts = chat_prompts(tok, PROMPT_TEXTS)  # different lengths: left padding
    with eval_mode(model):
        decoders = []
        for _ in range(2):
            pre = prefill(model, prompts, 0, tok.pad_token_id, None, logits_to_keep=1)
            decoders.append((pre, pre.out.logits[:, -1].float()))
        model_dec = ModelDecoder(model, decoders[0][0], None)
        packed_weights(model, TRAINED)  # made here: so short a call would not pack them
        packed = packed_decoder(model, decoders[1][0], steps, TRAINED)
        assert isinstance(packed, (PackedDecoder, StaticDecoder))  # CUDA: graphs.py
        ids_B = decoders[0][1].argmax(-1)
        pairs = []
        for step in range(steps):
            if step == 2:  # row 0 branches into two, row 3 ends
                index_B = torch.tensor([0, 0, 2, 1], device=model.device)
                model_dec.select(index_B)
                packed.select(index_B)
                ids_B = ids_B[index_B]
                ids_B[1] = (ids_B[1] + 1) % len(tok)
            a, b = model_dec.step(ids_B).float(), packed.step(ids_B).float()
            pairs.append((a, b))
            ids_B = a.argmax(-1)
    return pairs


@pytest.mark.usefixtures("half_precision")
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_packed_step_is_the_models_forward(
    arch: str, dtype: str, tiny_llama: Path, tiny_qwen2: Path, tiny_qwen3: Path
) -> None:
    """Bit for bit in bf16 on a CPU (the same kernels and formulas); to rounding in fp32
    (the concatenated products sum in another order)."""
    path = {"llama": tiny_llama, "qwen2": tiny_qwen2, "qwen3": tiny_qwen3}[arch]
    model, tok = loaded(path, dtype)
    for a, b in run_both(model, tok):
        if dtype == "bfloat16":
            assert torch.equal(a, b), (a - b).abs().max()
        else:
            assert (a - b).abs().max() < 1e-4


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_the_fallback_decode_step_is_the_models_forward_in_bf16(
    arch: str, tiny_llama: Path, tiny_qwen3: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the probe switched off after loading, the packed step's bf16 linears are plain
    `F.linear`s, and the step is the model's forward bit for bit, on any CPU."""
    monkeypatch.setattr(cpu, "ASSUME", True)
    model, tok = loaded({"llama": tiny_llama, "qwen3": tiny_qwen3}[arch], "bfloat16")
    monkeypatch.setattr(cpu, "ASSUME", False)  # the packing happens at the first step
    pairs = run_both(model, tok)
    assert pairs
    for a, b in pairs:
        assert torch.equal(a, b), (a - b).abs().max()


@pytest.mark.usefixtures("half_precision")
def test_sampler_completions_are_the_same_with_and_without_it(tiny_llama: Path) -> None:
    """Through the sampler (LoRA merged in, after an update, free text and constrained
    thinking): identical tokens and log-probs in bf16."""
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4, dtype="bfloat16", seed=0))
    tok = learner.tokenizer
    prompts = chat_prompts(tok, PROMPT_TEXTS) * 3
    params = SamplingParams(max_tokens=MIN_ROOM_TO_PACK, temperature=1.0, seed=3)
    datums = [
        to_datum(p, c)
        for p, c in zip(prompts, learner.sampler().sample(prompts, params), strict=True)
    ]
    learner.forward_backward(datums, is_loss)
    learner.optim_step(1e-2)
    sampler = learner.sampler()
    runs = {}
    for packed in (False, True):
        sampler.packed_decode = packed
        runs[packed] = sampler.sample(prompts, params)
    assert [c.tokens for c in runs[True]] == [c.tokens for c in runs[False]]
    assert [c.logprobs for c in runs[True]] == [c.logprobs for c in runs[False]]
    assert sum(len(c.tokens) for c in runs[True]) > 2 * len(prompts)  # it really decoded
    assert model_has_packed(learner.model)


def model_has_packed(model) -> bool:
    return bool(model.__dict__.get(_SLOT))


@pytest.mark.usefixtures("half_precision")
def test_short_answers_pack_only_weights_packed_already(tiny_llama: Path) -> None:
    """A call that may decode fewer than MIN_ROOM_TO_PACK tokens does not pay for packing,
    but uses weights a longer call packed; both sample what the model's forward does."""
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4, dtype="bfloat16", seed=0))
    prompts = chat_prompts(learner.tokenizer, PROMPT_TEXTS)
    short = SamplingParams(max_tokens=MIN_ROOM_TO_PACK - 1, temperature=1.0, seed=5)
    sampler = learner.sampler()
    first = sampler.sample(prompts, short)
    assert not model_has_packed(learner.model)
    sampler.sample(prompts, SamplingParams(max_tokens=MIN_ROOM_TO_PACK, seed=5))
    assert model_has_packed(learner.model)
    again = sampler.sample(prompts, short)  # now decoded by the packed step
    assert [c.tokens for c in again] == [c.tokens for c in first]
    assert [c.logprobs for c in again] == [c.logprobs for c in first]


def test_new_weights_get_newly_packed_weights(tiny_llama: Path) -> None:
    """Full fine-tuning updates weights in place; a merged adapter is a new tensor: both
    change the key, so the packed step never computes with old weights."""
    model, tok = loaded(tiny_llama, "float32")
    first = packed_weights(model, TRAINED)
    assert first is not None and packed_weights(model, TRAINED) is first  # kept
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.add_(0.5)  # an optimizer step, in place
    second = packed_weights(model, TRAINED)
    assert second is not None and second is not first
    for a, b in run_both(model, tok, steps=2):
        assert (a - b).abs().max() < 1e-4  # with the updated weight
    drop_packed(model)
    assert not model_has_packed(model)

    lora, tok = loaded(tiny_llama, "float32", lora_rank=4)
    with merged(lora, TRAINED):
        before = packed_weights(lora, TRAINED)
    with torch.no_grad():
        for name, param in lora.named_parameters():
            if "lora_B" in name:
                param.add_(0.1)
    with merged(lora, TRAINED):
        after = packed_weights(lora, TRAINED)
        assert after is not None and after is not before
        for a, b in run_both(lora, tok, steps=2):
            assert (a - b).abs().max() < 1e-4


def test_it_stands_aside_where_it_would_compute_something_else(tiny_llama: Path) -> None:
    lora, tok = loaded(tiny_llama, "float32", lora_rank=4)
    # an active adapter that is not merged would be ignored: refused
    assert packed_weights(lora, TRAINED) is None
    # an architecture it does not know
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64))
    assert packed_weights(gpt2, TRAINED) is None
    # a sliding-window layer
    model, _ = loaded(tiny_llama, "float32")
    model.model.layers[1].self_attn.sliding_window = 8
    assert packed_weights(model, TRAINED) is None


def test_a_full_cache_is_an_error_not_a_wrong_answer(tiny_llama: Path) -> None:
    model, tok = loaded(tiny_llama, "float32")
    prompts = chat_prompts(tok, PROMPT_TEXTS[:2])
    with eval_mode(model):
        pre = prefill(model, prompts, 0, tok.pad_token_id, None, logits_to_keep=1)
        packed_weights(model, TRAINED)
        decoder = packed_decoder(model, pre, 1, TRAINED)
        assert decoder is not None
        ids_B = torch.tensor([5, 6])
        decoder.step(ids_B)
        with pytest.raises(RuntimeError, match="decode cache is full"):
            decoder.step(ids_B)
