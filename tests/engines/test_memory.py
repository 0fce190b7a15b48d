"""memory.py: the learner's micro-batch budget from a model's shape and the free memory,
worked by hand on the Qwen3-0.6B shape."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from spiral.engines.loading import ModelConfig
from spiral.engines.torch.learner import TorchLearner
from spiral.engines.torch.memory import (
    CPU_TOKENS,
    GIB,
    MAX_TOKENS,
    STEP,
    activation_bytes_per_token,
    micro_batch_budget,
    smaller_after_oom,
    step_reserve,
    trainable_reserve,
)
from spiral.errors import LearnerOutOfMemory
from spiral.types import Datum

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


@pytest.mark.usefixtures("half_precision")
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


def test_the_budget_after_running_out_of_memory_is_half_in_whole_steps() -> None:
    assert smaller_after_oom(18432) == 9216
    assert smaller_after_oom(3072) == 1024  # 1536 rounds down to one step
    assert smaller_after_oom(2048) == 1024
    assert smaller_after_oom(1024) is None  # nothing smaller to try


def _long_datums(vocab: int, rows: int = 12, length: int = 600) -> list[Datum]:
    rng = random.Random(0)
    out = []
    for i in range(rows):
        ids = [rng.randrange(10, vocab - 10) for _ in range(length + 1)]
        n = len(ids) - 1
        out.append(
            Datum(tuple(ids[:-1]), tuple(ids[1:]), (-1.0,) * n, (0.5 - i % 2,) * n, (1.0,) * n)
        )
    return out


def _out_of_memory_above(
    learner: TorchLearner, tokens: int, monkeypatch: pytest.MonkeyPatch
) -> list[int]:
    """Make micro-batches of more than `tokens` tokens raise CUDA's out-of-memory error on
    their second forward (the first has already added its gradient); returns the sizes
    of the micro-batches run."""
    real = learner._batch_forward
    sizes: list[int] = []

    def forward(batch: Any, *args: Any, **kwargs: Any) -> Any:
        size = sum(len(d.input_ids) for d in batch)
        sizes.append(size)
        if len(sizes) > 1 and size > tokens:
            raise torch.OutOfMemoryError("CUDA out of memory (test)")
        return real(batch, *args, **kwargs)

    monkeypatch.setattr(learner, "_batch_forward", forward)
    return sizes


def test_a_step_that_runs_out_of_memory_runs_again_with_halves(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sized micro-batches (4096 tokens on a CPU) that run out of memory: the step runs
    again from cleared gradients with 2048-token micro-batches, giving the gradient of a
    learner fixed at 2048, and 2048 stays the cap."""
    cfg = ModelConfig(str(tiny_llama), lora_rank=4, seed=0)
    learner = TorchLearner(cfg, micro_batch_tokens=0)
    learner.share_prefix = False
    datums = _long_datums(len(learner.tokenizer))
    sizes = _out_of_memory_above(learner, 2048, monkeypatch)
    with pytest.warns(UserWarning, match="runs again with 2048"):
        learner.forward_backward(datums, is_loss)
    assert sizes[0] > 2048 and max(sizes[2:]) <= 2048  # the second 4096 batch failed
    assert learner.micro_batch_tokens == 2048
    fixed = TorchLearner(cfg, micro_batch_tokens=2048)
    fixed.share_prefix = False
    fixed.forward_backward(datums, is_loss)
    for (name, p), (_, q) in zip(learner._named_trainable(), fixed._named_trainable(), strict=True):
        assert p.grad is not None and q.grad is not None, name
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4)
    learner.model.zero_grad(set_to_none=True)
    sizes.clear()
    learner.forward_backward(datums, is_loss)  # the cap holds: no failure, no warning
    assert max(sizes) <= 2048


def test_running_out_of_memory_says_what_to_set_where_a_retry_would_lose_work(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fixed micro-batch size, or gradients already accumulated by an earlier call
    (which clearing would lose): one line naming the key to set."""
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4), micro_batch_tokens=4096)
    learner.share_prefix = False
    datums = _long_datums(len(learner.tokenizer))
    _out_of_memory_above(learner, 2048, monkeypatch)
    with pytest.raises(LearnerOutOfMemory, match="set micro_batch_tokens=2048 or lower"):
        learner.forward_backward(datums, is_loss)
    sized = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4), micro_batch_tokens=0)
    sized.share_prefix = False
    sized.forward_backward(datums[:2], is_loss)  # gradients now held
    _out_of_memory_above(sized, 2048, monkeypatch)
    with pytest.raises(LearnerOutOfMemory, match="micro_batch_tokens=2048"):
        sized.forward_backward(datums, is_loss)
