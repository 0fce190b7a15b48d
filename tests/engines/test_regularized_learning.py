"""Learner with merged rows, single-option tokens and the entropy / KL regulariser."""

from __future__ import annotations

import functools
import random
from pathlib import Path

import pytest
import torch

from spiral.algo.assemble import turn_to_datum
from spiral.algo.losses import importance_sampling_loss, ppo_loss
from spiral.algo.merge import merge_identical
from spiral.algo.regularizers import Regularizer
from spiral.engines.base import SamplingParams
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.learner import TorchLearner
from spiral.types import AnswerConstraint, Datum, Turn

from .conftest import PROMPT_TEXTS, chat_prompts


def _bracket_constraint(learner: TorchLearner) -> AnswerConstraint:
    """Answers "[0]".."[3]": with this tokenizer "[" and "]" are single-option tokens."""
    choices = tuple(tuple(learner.tokenizer(f"[{k}]")["input_ids"]) for k in range(4))
    assert all(len(c) == 3 for c in choices) and len({c[0] for c in choices}) == 1
    return AnswerConstraint(choices=choices)


def _rows(learner: TorchLearner, seed: int, n: int = 48) -> list[Datum]:
    """Rows as the loop builds them: two prompts asked n/2 times each, random advantages."""
    prompts = chat_prompts(learner.tokenizer, PROMPT_TEXTS[:2]) * (n // 2)
    constraint = _bracket_constraint(learner)
    params = SamplingParams(max_tokens=8, seed=seed, temperature=learner.temperature)
    out = learner.sampler().sample(prompts, params, [constraint] * n)
    rng = random.Random(seed)
    return [
        turn_to_datum(
            Turn("TicTacToe-v0", 0, "policy", "o", tuple(p), c), rng.choice((-1.5, -1.0, 0.5, 1.0))
        )
        for p, c in zip(prompts, out, strict=True)
    ]


def _grads(learner: TorchLearner) -> dict[str, torch.Tensor]:
    grads = {n: p.grad.clone() for n, p in learner.model.named_parameters() if p.grad is not None}
    learner.model.zero_grad(set_to_none=True)
    return grads


def _warm(learner: TorchLearner) -> None:
    """One step so that LoRA B is non-zero and every gradient is non-trivial."""
    learner.forward_backward(_rows(learner, seed=99), importance_sampling_loss)
    learner.optim_step(5e-2)


@pytest.mark.parametrize("loss_name", ["importance_sampling", "ppo"])
def test_merged_rows_give_the_unmerged_gradient_on_and_off_policy(
    tiny_llama: Path, loss_name: str
) -> None:
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4), micro_batch_tokens=10**6)
    _warm(learner)
    rows = _rows(learner, seed=0)
    merged, metrics = merge_identical(rows)
    assert metrics["merge/rows_out"] < len(rows) / 3  # many duplicates
    base = importance_sampling_loss if loss_name == "importance_sampling" else ppo_loss
    loss_fn = functools.partial(base, clip=0.02)
    for phase in ("on-policy", "off-policy"):
        whole = learner.forward_backward(rows, loss_fn)
        a = _grads(learner)
        merged_metrics = learner.forward_backward(merged, loss_fn)
        b = _grads(learner)
        assert set(a) == set(b) and a
        for name in a:
            assert torch.allclose(a[name], b[name], atol=1e-5), (phase, name)
        for key in ("loss", "num_tokens", "ratio_mean", "clip_frac", "entropy"):
            assert merged_metrics[key] == pytest.approx(whole[key], abs=1e-5), (phase, key)
        if phase == "on-policy":
            assert whole["ratio_max"] == pytest.approx(1.0, abs=1e-4)
            # Move the weights: the same rows are now stale, ratios leave 1 and PPO clips.
            learner.forward_backward(_rows(learner, seed=5), importance_sampling_loss)
            learner.optim_step(5e-2)
            _grads(learner)
    assert whole["clip_frac"] > 0.0


def test_single_option_tokens_stay_out_of_diagnostics(tiny_llama: Path) -> None:
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4))
    rows = _rows(learner, seed=1, n=8)
    assert all(sum(d.mask) == 1.0 for d in rows)  # only the digit of "[k]" is trained
    metrics = learner.forward_backward(rows, importance_sampling_loss)
    assert metrics["num_tokens"] == 8.0
    # Entropy is that of the four legal digits: between 0 and ln 4.
    assert 0.0 < metrics["entropy"] <= float(torch.log(torch.tensor(4.0))) + 1e-6


def test_entropy_bonus_spreads_the_policy_and_kl_pulls_it_back(tiny_llama: Path) -> None:
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4))
    rows = [
        Datum(**{**d.__dict__, "advantages": tuple(0.0 for _ in d.advantages)})
        for d in _rows(learner, seed=2, n=8)
    ]
    kl_ref = Regularizer(kl_coef=1.0)
    start = learner.forward_backward(rows, importance_sampling_loss, kl_ref)
    assert start["kl_to_magnet"] == pytest.approx(0.0, abs=1e-7)  # LoRA B = 0: the base
    learner.model.zero_grad(set_to_none=True)
    # Push the policy away from the base with a strong positive advantage on one answer.
    pushed = [Datum(**{**rows[0].__dict__, "advantages": (5.0,) * len(rows[0].mask)})]
    for _ in range(3):
        learner.forward_backward(pushed, importance_sampling_loss)
        learner.optim_step(5e-2)
    moved = learner.forward_backward(rows, importance_sampling_loss, kl_ref)
    learner.model.zero_grad(set_to_none=True)
    assert moved["kl_to_magnet"] > 1e-3
    for _ in range(5):
        learner.forward_backward(rows, importance_sampling_loss, kl_ref)
        learner.optim_step(2e-2)
    back = learner.forward_backward(rows, importance_sampling_loss, kl_ref)
    learner.model.zero_grad(set_to_none=True)
    assert back["kl_to_magnet"] < moved["kl_to_magnet"]


def test_entropy_bonus_alone_spreads_the_legal_move_distribution(tiny_llama: Path) -> None:
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4))
    _warm(learner)
    rows = [
        Datum(**{**d.__dict__, "advantages": tuple(0.0 for _ in d.advantages)})
        for d in _rows(learner, seed=2, n=8)
    ]
    learner._optimizer = None  # fresh Adam moments: only the bonus drives these steps
    bonus = Regularizer(entropy_coef=1.0)
    before = learner.forward_backward(rows, importance_sampling_loss, bonus)
    learner.model.zero_grad(set_to_none=True)
    for _ in range(5):
        learner.forward_backward(rows, importance_sampling_loss, bonus)
        learner.optim_step(1e-2)
    after = learner.forward_backward(rows, importance_sampling_loss, bonus)
    assert after["entropy"] > before["entropy"] + 0.01


def test_kl_to_the_reference_under_full_fine_tuning(tiny_llama: Path) -> None:
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=0))
    rows = _rows(learner, seed=3, n=8)
    reg = Regularizer(kl_coef=0.5)
    first = learner.forward_backward(rows, importance_sampling_loss, reg)
    assert first["kl_to_magnet"] == pytest.approx(0.0, abs=1e-7)
    learner.optim_step(1e-2)
    second = learner.forward_backward(rows, importance_sampling_loss, reg)
    assert second["kl_to_magnet"] > 0.0
    # The reference is a frozen copy: training did not move it.
    ref = learner._reference_model()
    assert not any(p.requires_grad for p in ref.parameters())
