"""Full fine-tuning in a half-precision compute dtype keeps fp32 master weights: an update
at SPIRAL's full fine-tuning rate (1e-6) moves the weights it should, the products still
run in bf16, the sampler scores as the learner does, and the KL's frozen reference uses
its own head."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from spiral.algo.regularizers import Regularizer
from spiral.engines.base import SamplingParams
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.learner import TorchLearner
from spiral.engines.torch.loading import load_model_and_tokenizer
from spiral.engines.torch.precision import compute_dtype

from .conftest import PROMPT_TEXTS, chat_prompts, is_loss, to_datum


def _learner(model: Path, dtype: str = "bfloat16") -> TorchLearner:
    return TorchLearner(ModelConfig(str(model), lora_rank=0, dtype=dtype, device="cpu"))


def _datums(learner: TorchLearner) -> list:
    prompts = chat_prompts(learner.tokenizer, PROMPT_TEXTS)
    out = learner.sampler().sample(prompts, SamplingParams(max_tokens=6, seed=0))
    advantages = [1.0, -1.0, 0.5, -0.5][: len(prompts)]
    return [to_datum(p, c, a) for p, c, a in zip(prompts, out, advantages, strict=True)]


@pytest.mark.usefixtures("half_precision")
def test_trained_weights_stay_fp32_and_compute_in_bf16(tiny_llama: Path) -> None:
    learner = _learner(tiny_llama)
    assert {p.dtype for p in learner.model.parameters()} == {torch.float32}
    assert compute_dtype(learner.model) == torch.bfloat16
    # A model only sampled (eval, play, serve) or a frozen reference is bf16 itself.
    frozen, _ = load_model_and_tokenizer(
        ModelConfig(str(tiny_llama), lora_rank=0, dtype="bfloat16", device="cpu"), trained=False
    )
    assert {p.dtype for p in frozen.parameters()} == {torch.bfloat16}
    assert compute_dtype(frozen) is None
    # The products run in bf16: the learner's log-probs are those of the bf16 model
    # (autocast's rounding), not of the fp32 weights.
    datums = _datums(learner)
    mixed = torch.tensor([v for row in learner.logprobs(datums) for v in row])
    fp32 = _learner(tiny_llama, "float32")
    exact = torch.tensor([v for row in fp32.logprobs(datums) for v in row])
    assert compute_dtype(fp32.model) is None
    assert not torch.allclose(mixed, exact, atol=1e-5)
    torch.testing.assert_close(mixed, exact, atol=0.1, rtol=0)


@pytest.mark.usefixtures("half_precision")
def test_an_update_at_lr_1e6_moves_the_weights(tiny_llama: Path) -> None:
    learner = _learner(tiny_llama)
    datums = _datums(learner)
    before = {n: p.detach().clone() for n, p in learner._named_trainable()}
    learner.forward_backward(datums, is_loss)
    grads = {n: p.grad.clone() for n, p in learner._named_trainable() if p.grad is not None}
    assert all(g.dtype == torch.float32 for g in grads.values())
    learner.optim_step(1e-6)
    moved = kept_in_bf16 = total = 0
    for name, p in learner._named_trainable():
        has_grad = grads[name] != 0
        step = p.detach() - before[name]
        moved += int((step[has_grad] != 0).sum())
        # The same step applied to bf16 weights: what pure bf16 training would keep.
        bf16 = before[name].bfloat16()
        kept_in_bf16 += int(((bf16 + step.bfloat16()) != bf16)[has_grad].sum())
        total += int(has_grad.sum())
    assert total > 1000
    assert moved / total > 0.99  # Adam's first step moves every weight with a gradient
    assert kept_in_bf16 / total < 0.05  # in bf16 nearly all of it would have rounded away


@pytest.mark.usefixtures("half_precision")
def test_the_sampler_scores_as_the_learner_does(tiny_llama: Path) -> None:
    learner = _learner(tiny_llama)
    datums = _datums(learner)
    learner.forward_backward(datums, is_loss)
    learner.optim_step(1e-3)
    datums = _datums(learner)  # sampled under autocast by the updated model
    scored = learner.logprobs(datums)
    for d, row in zip(datums, scored, strict=True):
        trained = [t for t, m in enumerate(d.mask) if m > 0]
        got = torch.tensor([row[t] for t in trained])
        want = torch.tensor([d.sampler_logprobs[t] for t in trained])
        torch.testing.assert_close(got, want, atol=0.05, rtol=0)


@pytest.mark.usefixtures("half_precision")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_kl_reference_of_full_fine_tuning_is_the_frozen_model(
    tiny_llama: Path, dtype: str
) -> None:
    """After the head itself has moved, the reference distributions are the base model's
    own (hidden states and head), not the base's hidden states through the live head."""
    learner = _learner(tiny_llama, dtype)
    datums = _datums(learner)
    for _ in range(3):
        learner.forward_backward(datums, is_loss)
        learner.optim_step(1e-2)
    reg = Regularizer(kl_coef=0.1, kl_reference="reference")
    assert reg.needs_reference_model
    learner.share_prefix = False
    fwd = learner._batch_forward(datums, every_target=True)
    magnet = learner._reference_dists(datums, fwd.plan, False, snapshot=False)
    targets = torch.tensor(fwd.plan.targets).unsqueeze(1)
    got = magnet(slice(None)).gather(1, targets).squeeze(1)
    base = _learner(tiny_llama, dtype)
    want = torch.tensor([v for row in base.logprobs(datums) for v in row])
    # bf16: the reference is a bf16 model, the base here fp32 weights under autocast.
    atol = 0.1 if dtype == "bfloat16" else 1e-5
    torch.testing.assert_close(got, want, atol=atol, rtol=0)
    # The live model has moved away from it: the check above can fail.
    live = fwd.terms.values_N.detach()
    assert float((live - want).abs().max()) > 10 * atol
