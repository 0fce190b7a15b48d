"""Full fine-tuning at SPIRAL's learning rate (1e-6) in bf16 compute: how many weights an
update moves with fp32 master weights (what the learner does), and how many the same
update would move if the weights were kept in bf16 (the update rounded onto bf16 weights).

    python docs/results/full-ft-precision/full_ft_precision.py [OUT.json]

On the embedded SmolLM2-135M, one AdamW step over 16 sampled Kuhn-style completions.
"""

from __future__ import annotations

import json
import sys
import time

from spiral.algo.losses import get_loss
from spiral.engines.base import SamplingParams
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.learner import TorchLearner
from spiral.engines.torch.precision import compute_dtype
from spiral.types import Datum


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else ""
    learner = TorchLearner(ModelConfig("embedded", lora_rank=0, dtype="bfloat16", device="cpu"))
    tok = learner.tokenizer
    texts = [f"You hold card {c} in Kuhn poker. Reply [check] or [bet]." for c in "JQK"] * 6
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True)
        for t in texts[:16]
    ]
    prompts = [list(p["input_ids"] if hasattr(p, "keys") else p) for p in prompts]
    completions = learner.sampler().sample(prompts, SamplingParams(max_tokens=8, seed=0))
    datums = []
    for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        ids = list(p) + list(c.tokens)
        n = len(ids) - 1
        mask = [0.0] * (len(p) - 1) + [1.0] * len(c.tokens)
        logps = [0.0] * (len(p) - 1) + list(c.logprobs)
        adv = 1.0 if i % 2 else -1.0
        datums.append(Datum(tuple(ids[:-1]), tuple(ids[1:]), tuple(logps), (adv,) * n, tuple(mask)))
    before = {n: p.detach().clone() for n, p in learner._named_trainable()}
    start = time.perf_counter()
    learner.forward_backward(datums, get_loss("importance_sampling"))
    has_grad = {n: p.grad != 0 for n, p in learner._named_trainable() if p.grad is not None}
    learner.optim_step(1e-6)
    seconds = time.perf_counter() - start
    moved = kept_bf16 = total = 0
    for name, p in learner._named_trainable():
        if name not in has_grad:
            continue
        mask = has_grad[name]
        step = p.detach() - before[name]
        moved += int((step != 0)[mask].sum())
        bf16 = before[name].bfloat16()
        kept_bf16 += int(((bf16 + step.bfloat16()) != bf16)[mask].sum())
        total += int(mask.sum())
    result = {
        "model": "SmolLM2-135M-Instruct (embedded)",
        "weights_dtype": str({p.dtype for p in learner.model.parameters()}),
        "compute_dtype": str(compute_dtype(learner.model)),
        "learning_rate": 1e-6,
        "weights_with_gradient": total,
        "share_moved_fp32_master": moved / total,
        "share_moved_if_kept_in_bf16": kept_bf16 / total,
        "step_seconds": seconds,
        "device": "cpu",
    }
    print(json.dumps(result, indent=1))
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
