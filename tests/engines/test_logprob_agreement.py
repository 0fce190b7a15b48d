"""Sampler and learner log-probs agree (fp32: 1e-4; bf16: 0.05) for the same weights.

Free text, constrained with and without thinking, prompts of different lengths (padding
on the sampler side, right padding and packing on the learner side), LoRA and full
fine-tuning, Llama and Qwen3, a non-unit temperature, and after an optimiser step.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spiral.engines.loading import ModelConfig
from spiral.engines.torch.learner import TorchLearner
from spiral.types import Datum

from .conftest import is_loss, max_gap, sample_agreement_datums

TEMPERATURE = 0.8


def _sample_datums(learner: TorchLearner, seed: int) -> list[Datum]:
    return sample_agreement_datums(learner, seed, TEMPERATURE)


@pytest.mark.parametrize(("arch", "rank"), [("llama", 4), ("llama", 0), ("qwen3", 4), ("qwen3", 0)])
def test_sampler_and_learner_agree(
    arch: str, rank: int, tiny_llama: Path, tiny_qwen3: Path
) -> None:
    path = tiny_llama if arch == "llama" else tiny_qwen3
    learner = TorchLearner(ModelConfig(str(path), lora_rank=rank), micro_batch_tokens=100)
    learner.temperature = TEMPERATURE
    datums = _sample_datums(learner, seed=0)
    assert any(d.constraint is not None and d.constraint.think_budget > 0 for d in datums)
    assert max_gap(learner, datums) < 1e-4
    # The loss sees ratio 1 on fresh samples; then move the weights and check again.
    metrics = learner.forward_backward(datums, is_loss)
    assert abs(metrics["ratio"] - 1.0) < 1e-4
    learner.optim_step(1e-2)
    fresh = _sample_datums(learner, seed=1)
    assert max_gap(learner, fresh) < 1e-4
    assert max_gap(learner, datums) > 1e-3  # the step really changed the policy


BF16_TOLERANCE = 0.05  # bf16 rounds differently in the sampler's and the learner's layouts


@pytest.mark.usefixtures("half_precision")
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_sampler_and_learner_agree_in_bf16(arch: str, tiny_llama: Path, tiny_qwen3: Path) -> None:
    path = tiny_llama if arch == "llama" else tiny_qwen3
    cfg = ModelConfig(str(path), lora_rank=4, dtype="bfloat16")
    learner = TorchLearner(cfg, micro_batch_tokens=100)
    learner.temperature = TEMPERATURE
    datums = _sample_datums(learner, seed=0)
    assert max_gap(learner, datums) < BF16_TOLERANCE
    metrics = learner.forward_backward(datums, is_loss)
    assert abs(metrics["ratio"] - 1.0) < BF16_TOLERANCE / 5  # on-policy: the ratio is ~1
    learner.optim_step(1e-2)
    assert max_gap(learner, _sample_datums(learner, seed=1)) < BF16_TOLERANCE
