"""Where the torch engine's sampler and learner spend their time, on one device.

    python docs/results/engine-h100/engine_profile.py \
        --shape benchmarks/model-shapes/qwen3-0.6b.json --device cuda --json engine-profile.json

Builds a random-initialised model of the shape (no download), then times, per decode step
of `--batch` rows after a `--prompt`-token prefill:
- `sampler_step_ms`: a whole `TorchSampler.sample` call's decode loop (our sampler);
- `forward_lora_ms`: the model's forward alone for one new token per row, LoRA adapters on
  (what the sampler runs each step);
- `forward_base_ms`: the same forward with the adapters switched off;
- `choose_ms`: the sampler's per-step token choice (`_step`) alone, on one step's logits;
and the top operators of a profiled decode loop by self CPU time. The differences say
whether the step is bound by the forward's kernel launches, by LoRA's extra layers, or by
the sampler's own work. Then the learner: `learn_shared_s` / `learn_unshared_s`, one
`forward_backward` over the sampled rows with and without prefix sharing (median of 3,
after an untimed call of each), and the top operators of one call of each. `--layers N`
shrinks the model for a dry run on a CPU.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from spiral.engines.base import SamplingParams
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.learner import TorchLearner
from spiral.engines.torch.loading import cache_keyword
from spiral.engines.torch.prefill import prefill
from spiral.engines.torch.sampler_rows import Row as _Row
from spiral.testing import make_shaped_model


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _forward_ms(model: Any, prompts: list[list[int]], pad: int, steps: int) -> float:
    """Milliseconds per decode forward (one token per row) after a prefill."""
    device = model.device
    with torch.inference_mode():
        pre = prefill(model, prompts, 0, pad, None, logits_to_keep=1)
        cache, mask_BK, pos_B = pre.cache, pre.mask_BK, pre.next_pos_B
        ids_B1 = pre.out.logits[:, -1, :].argmax(-1, keepdim=True)
        kw = cache_keyword(model)
        times = []
        for _ in range(steps):
            mask_BK = torch.cat([mask_BK, torch.ones_like(mask_BK[:, :1])], dim=1)
            _sync(device)
            start = time.perf_counter()
            out = model(
                input_ids=ids_B1,
                attention_mask=mask_BK,
                position_ids=pos_B.unsqueeze(1),
                use_cache=True,
                **{kw: cache},
            )
            _sync(device)
            times.append(time.perf_counter() - start)
            pos_B = pos_B + 1
            ids_B1 = out.logits[:, -1, :].argmax(-1, keepdim=True)
    times.sort()
    return 1000 * times[len(times) // 2]


def _profile_learner(
    learner: TorchLearner,
    prompts: list[list[int]],
    params: SamplingParams,
    activities: list[Any],
    result: dict[str, Any],
) -> None:
    from spiral.engines.torch.measure import _benchmark_loss, _learner_datums

    device = learner.model.device
    datums = _learner_datums(prompts, learner.sampler().sample(prompts, params))
    for share in (True, False):
        learner.share_prefix = share
        times = []
        for _ in range(4):
            _sync(device)
            start = time.perf_counter()
            learner.forward_backward(datums, _benchmark_loss)
            _sync(device)
            times.append(time.perf_counter() - start)
            learner.model.zero_grad(set_to_none=True)
        times = sorted(times[1:])
        name = "shared" if share else "unshared"
        result[f"learn_{name}_s"] = times[1]
        with torch.profiler.profile(activities=activities) as prof:
            learner.forward_backward(datums, _benchmark_loss)
            _sync(device)
        learner.model.zero_grad(set_to_none=True)
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
        result[f"learn_{name}_profile"] = table
        print(name, table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="benchmarks/model-shapes/qwen3-0.6b.json")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--layers", type=int, default=0, help="override num_hidden_layers")
    parser.add_argument("--model", default="", help="a model folder or 'embedded' (no --shape)")
    parser.add_argument("--json", default="")
    args = parser.parse_args()

    overrides = {"num_hidden_layers": args.layers} if args.layers else {}
    folder = Path(tempfile.mkdtemp()) / "model"
    if args.model:
        folder = args.model
    else:
        make_shaped_model(Path(args.shape), folder, device=args.device, **overrides)
    cfg = ModelConfig(str(folder), lora_rank=32, device=args.device, dtype=args.dtype)
    learner = TorchLearner(cfg)
    model, device = learner.model, learner.model.device
    sampler = learner.sampler()
    rng = random.Random(0)
    prompts = [[rng.randrange(5, 500) for _ in range(args.prompt)] for _ in range(args.batch)]
    params = SamplingParams(max_tokens=args.new, temperature=1.0, seed=0)
    result: dict[str, Any] = {"device": str(device), "batch": args.batch, "prompt": args.prompt}
    if device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(device)

    sampler.sample(prompts[:2], SamplingParams(max_tokens=4, temperature=1.0, seed=0))
    sampler.sample(prompts, params)  # warm-up at full size
    sampler.last_stats.clear()
    sampler.sample(prompts, params)
    stats = sampler.last_stats
    steps = stats["decode_tokens"] / args.batch
    result["sampler_step_ms"] = 1000 * stats["decode_s"] / steps
    result["sampler_decode_tokens_per_s"] = stats["decode_tokens"] / stats["decode_s"]

    result["forward_lora_ms"] = _forward_ms(model, prompts, sampler.pad_id, 16)
    with model.disable_adapter():
        result["forward_base_ms"] = _forward_ms(model, prompts, sampler.pad_id, 16)

    logits_BV = torch.randn(args.batch, model.config.vocab_size, device=device)
    step_params = SamplingParams(max_tokens=10**6, temperature=1.0, seed=0)
    times = []
    for i in range(20):
        nodes = [[_Row(b, random.Random(i * 100 + b), None)] for b in range(args.batch)]
        _sync(device)
        start = time.perf_counter()
        sampler._step(logits_BV, nodes, step_params)
        _sync(device)
        times.append(time.perf_counter() - start)
    times.sort()
    result["choose_ms"] = 1000 * times[len(times) // 2]

    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        sampler.sample(prompts, SamplingParams(max_tokens=8, temperature=1.0, seed=1))
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20)
    result["profile_top_ops"] = table
    print(table)
    _profile_learner(learner, prompts, params, activities, result)
    print(json.dumps({k: v for k, v in result.items() if "profile" not in k}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
