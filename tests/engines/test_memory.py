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
    step_reserve,
    trainable_reserve,
)

from .conftest import is_loss, sample_agreement_datums

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
    assert micro_batch_budget(80 * GIB, 0, per_token) == 38912  # 38 x 1024
    # a 4 GiB optimizer state still to come leaves less: 37490.9
    assert micro_batch_budget(80 * GIB, 4 * GIB, per_token) == 36864
    assert micro_batch_budget(2 * GIB, 4 * GIB, per_token) == STEP  # never below one step
    assert micro_batch_budget(10_000 * GIB, 0, per_token) == MAX_TOKENS


def test_what_a_step_still_allocates(tiny_llama: Path) -> None:
    """LoRA: fp32 gradients (4 bytes a trainable weight) and, before the first step,
    AdamW's moments (8); full fine-tuning computing in bf16 over fp32 masters also gets
    autocast's bf16 copy of each weight (2). The learner's budget on a CPU stays
    `CPU_TOKENS` through a step."""
    lora = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4), micro_batch_tokens=0)
    n = sum(p.numel() for p in lora.model.parameters() if p.requires_grad)
    assert 0 < n < sum(p.numel() for p in lora.model.parameters())
    assert trainable_reserve(lora.model) == 12 * n
    assert step_reserve(lora.model, optimizer_made=False) == 12 * n
    assert step_reserve(lora.model, optimizer_made=True) == 4 * n
    full = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=0, dtype="bfloat16"))
    m = sum(p.numel() for p in full.model.parameters())
    assert step_reserve(full.model, optimizer_made=False) == (4 + 8 + 2) * m
    assert (
        lora.sized_micro_batches
        and not TorchLearner(
            ModelConfig(str(tiny_llama), lora_rank=4), micro_batch_tokens=512
        ).sized_micro_batches
    )
    lora.forward_backward(sample_agreement_datums(lora, 0, 1.0), is_loss)
    assert lora.micro_batch_tokens == CPU_TOKENS
