"""Shared set-up of this folder's learner A/Bs: the embedded model in bf16 with LoRA r32
and the engine bench's learner workload (16 rows of 256 random prompt tokens, 192 of them
shared, plus 32 sampled tokens each)."""

from __future__ import annotations

import time

import torch

from spiral.bench.engine import _benchmark_loss, _learner_datums, _prompts
from spiral.engines.base import SamplingParams
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.learner import TorchLearner
from spiral.types import Datum


def learner_and_datums() -> tuple[TorchLearner, list[Datum]]:
    learner = TorchLearner(ModelConfig(model="embedded", lora_rank=32, seed=0, dtype="bfloat16"))
    tok = learner.tokenizer
    prompts = _prompts(len(tok), set(tok.all_special_ids), 16, 256, 192, 0)
    params = SamplingParams(max_tokens=32, temperature=1.0, seed=0)
    return learner, _learner_datums(prompts, learner.sampler().sample(prompts, params))


def timed_call(learner: TorchLearner, datums: list[Datum]) -> tuple[float, torch.Tensor]:
    """Seconds of one forward_backward, and the gradient it left (flattened, fp32)."""
    start = time.perf_counter()
    learner.forward_backward(datums, _benchmark_loss)
    seconds = time.perf_counter() - start
    grads = [p.grad.float().flatten() for p in learner.model.parameters() if p.grad is not None]
    learner.model.zero_grad(set_to_none=True)
    return seconds, torch.cat(grads)


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / a.norm())
