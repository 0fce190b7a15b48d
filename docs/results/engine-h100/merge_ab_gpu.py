"""The merged-adapter sampler vs PEFT's adapter path on a CUDA device, one process, arms
alternating (rep 0 is a warm-up): a random-initialised Qwen3-0.6B shape in bf16, LoRA
rank 32 with B drawn non-zero, 16 prompts of 256 tokens, 64 new tokens. Writes
merge-gpu.json into the folder named by the OUT environment variable (default: the current
folder). Run on a CUDA machine: `python3 docs/results/engine-h100/merge_ab_gpu.py`."""

from __future__ import annotations

import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from spiral.engines.base import SamplingParams
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.learner import TorchLearner
from spiral.engines.torch.merged import drop_merged
from spiral.testing import make_shaped_model


def main() -> None:
    folder = Path(tempfile.mkdtemp()) / "m"
    make_shaped_model(Path("benchmarks/model-shapes/qwen3-0.6b.json"), folder, device="cuda")
    cfg = ModelConfig(str(folder), lora_rank=32, device="cuda", dtype="bfloat16")
    learner = TorchLearner(cfg)
    with torch.no_grad():
        for name, param in learner.model.named_parameters():
            if "lora_B" in name:  # PEFT starts B at zero; make the adapter matter
                param.normal_(std=0.01)
    rng = random.Random(0)
    prompts = [[rng.randrange(5, 500) for _ in range(256)] for _ in range(16)]
    params = SamplingParams(max_tokens=64, temperature=1.0, seed=0)
    out: dict[str, Any] = {"gpu": torch.cuda.get_device_name(0)}
    for rep in range(3):
        for merge in (False, True):
            learner.merge_lora = merge
            drop_merged(learner.model)
            sampler = learner.sampler()
            torch.cuda.synchronize()
            start = time.perf_counter()
            sampler.sample(prompts, params)
            torch.cuda.synchronize()
            total = time.perf_counter() - start
            stats = sampler.last_stats
            step_ms = 1000 * stats["decode_s"] / (stats["decode_tokens"] / len(prompts))
            key = "merged" if merge else "adapter"
            if rep > 0:
                out.setdefault(key, []).append({"sample_s": total, "decode_step_ms": step_ms})
            print(rep, key, round(total, 3), round(step_ms, 1), flush=True)
    print(json.dumps(out))
    Path(os.environ.get("OUT", "."), "merge-gpu.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
