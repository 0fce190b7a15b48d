"""Sampling for a pool of LoRA adapters (population play): one mixed call vs one call per
adapter.

    python benchmarks/pool_decode.py [MODEL] [OUT.json]

`MEMBERS` pool members (copies of the trained adapter, nudged apart) and `ROWS` prompts of
`PROMPT_TOKENS` random ordinary tokens, dealt round-robin to the members, each row
sampling `NEW_TOKENS` free tokens at temperature 1. Two ways to run them:

- mixed: one sampler call with every row's adapter named, which the sampler runs through
  PEFT's mixed-adapter forward (the base products batched over every row, each adapter's
  low-rank products on its own rows), eager;
- per adapter: one call per member, each with its adapter merged into the weights and the
  packed decode step (on CUDA replayed as graphs over a static cache, the free text run
  ahead of the host), paying the merge and the packing of each member's weights.

Each arm runs once untimed (kernels, graphs, allocator), then `REPS` times, alternating;
reports the median seconds and generated tokens/s of each and their ratio, and the peak
memory. Timings compare only within one run on one machine.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from typing import Any

import torch
from ab_setup import report

from spiral.engines.base import SamplingParams
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.decode import drop_sampling_weights
from spiral.engines.torch.learner import TorchLearner
from spiral.engines.torch.measure import sync_device
from spiral.engines.torch.snapshots import take_snapshot

MEMBERS, ROWS, PROMPT_TOKENS, NEW_TOKENS, REPS = 4, 64, 128, 64, 3


def _members(learner: TorchLearner) -> list[str]:
    """`MEMBERS` LoRA snapshots of the trained adapter, each nudged further from it (as
    pool snapshots of other steps differ)."""
    names = [f"member{k}" for k in range(MEMBERS)]
    for k, name in enumerate(names):
        with torch.no_grad():
            for n, p in learner.model.named_parameters():
                if "lora_B" in n and ".default." in n:
                    p.add_(0.01 * (k + 1))
        take_snapshot(learner.model, name)
    return names


def _median_seconds(learner: TorchLearner, arms: dict[str, Any]) -> tuple[dict, dict]:
    """Each arm once untimed, then `REPS` times, alternating, every member merged and
    packed anew each time: median seconds and generated tokens per arm."""
    device = learner.model.device
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    tokens: dict[str, int] = {}
    for rep in range(REPS + 1):
        for arm, run in arms.items():
            drop_sampling_weights(learner.model)
            sync_device(device)
            start = time.perf_counter()
            tokens[arm] = run()
            sync_device(device)
            if rep:
                times[arm].append(time.perf_counter() - start)
    return {arm: statistics.median(t) for arm, t in times.items()}, tokens


def main() -> None:
    model = sys.argv[1] if len(sys.argv) > 1 else "embedded"
    learner = TorchLearner(ModelConfig(model, lora_rank=32, seed=0))
    device = learner.model.device
    names = _members(learner)
    rng = random.Random(0)
    vocab = len(learner.tokenizer)
    prompts = [[rng.randrange(100, vocab - 100) for _ in range(PROMPT_TOKENS)] for _ in range(ROWS)]
    owner = [names[i % MEMBERS] for i in range(ROWS)]
    sampler = learner.sampler()
    params = SamplingParams(max_tokens=NEW_TOKENS, temperature=1.0, seed=0)

    def mixed() -> int:
        return sum(len(c.tokens) for c in sampler.sample(prompts, params, adapters=owner))

    def per_adapter() -> int:
        generated = 0
        for name in names:
            mine = [p for p, o in zip(prompts, owner, strict=True) if o == name]
            generated += sum(
                len(c.tokens) for c in sampler.sample(mine, params, adapters=[name] * len(mine))
            )
        return generated

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds, tokens = _median_seconds(learner, {"mixed": mixed, "per_adapter": per_adapter})
    cuda = device.type == "cuda"
    result = {
        "model": model,
        "device": str(device),
        "members": MEMBERS,
        "rows": ROWS,
        "prompt_tokens": PROMPT_TOKENS,
        "new_tokens": NEW_TOKENS,
        **{f"{arm}/seconds": s for arm, s in seconds.items()},
        **{f"{arm}/tokens_per_s": tokens[arm] / seconds[arm] for arm in seconds},
        "per_adapter_speedup": seconds["mixed"] / seconds["per_adapter"],
        "peak_gpu_bytes": float(torch.cuda.max_memory_allocated(device)) if cuda else None,
    }
    report(result, sys.argv[2] if len(sys.argv) > 2 else "", hide="")


if __name__ == "__main__":
    main()
