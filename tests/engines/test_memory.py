"""memory.py: the learner's micro-batch budget from a model's shape and the free memory,
worked by hand on the Qwen3-0.6B shape."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from spiral.engines.loading import ModelConfig
from spiral.engines.torch.learner import TorchLearner
from spiral.engines.torch.memory import (
    CPU_TOKENS,
    GIB,
    MAX_TOKENS,
    STEP,
    activation_bytes_per_token,
    micro_batch_budget,
    trainable_reserve,
)

SHAPE = Path(__file__).resolve().parents[2] / "benchmarks" / "model-shapes" / "qwen3-0.6b.json"


def test_activations_per_token_on_the_qwen3_0_6b_shape() -> None:
    config = SimpleNamespace(**json.loads(SHAPE.read_text()))
    # per layer: 6 x 1024 + 2 x 16 x 128 + 2 x 8 x 128 + 4 x 3072 = 24576 bf16 values
    # (49152 bytes) + two fp32 norm inputs (8 x 1024 bytes) = 57344 bytes; 28 layers
    assert activation_bytes_per_token(config, 2, checkpointing=False) == 28 * 57344
    # checkpointed: each layer's bf16 input (28 x 1024 x 2) + one layer's activations
    assert activation_bytes_per_token(config, 2, checkpointing=True) == 57344 + 57344


def test_the_budget_is_three_quarters_of_what_is_left_in_whole_steps() -> None:
    per_token = 28 * 57344
    # 80 GiB free, nothing reserved: 0.75 x (80 GiB - 256 MiB - 1 GiB) / 1605632 = 39497.1
    assert micro_batch_budget(80 * GIB, 0, per_token) == 39424  # 154 x 256
    # a 4 GiB optimizer state still to come leaves less
    assert micro_batch_budget(80 * GIB, 4 * GIB, per_token) == 37376
    assert micro_batch_budget(2 * GIB, 4 * GIB, per_token) == STEP  # never below one step
    assert micro_batch_budget(10_000 * GIB, 0, per_token) == MAX_TOKENS


def test_zero_means_sized_to_the_device(tiny_llama: Path) -> None:
    """On a CPU `micro_batch_tokens=0` is `CPU_TOKENS`; the reserve counts 12 bytes per
    trainable weight (LoRA: the adapters only)."""
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4), micro_batch_tokens=0)
    assert learner.micro_batch_tokens == CPU_TOKENS
    trainable = sum(p.numel() for p in learner.model.parameters() if p.requires_grad)
    assert 0 < trainable < sum(p.numel() for p in learner.model.parameters())
    assert trainable_reserve(learner.model) == 12 * trainable
