"""Where the replayed decode step's time goes: its kernels by kind, against the bound.

    python3 benchmarks/graph_step_profile.py MODEL [ROWS ...] [--out OUT.json]

For each batch of ROWS rows (default 16 and 128) of 256-token prompts: the static decoder
(`spiral/engines/torch/graphs.py`) is loaded from a prefill, then
- `graph_step_ms`: one decode step replayed as a CUDA graph (median of 50 replays);
- `eager_step_ms`: the same step over the same buffers run eagerly (median of 20);
- `kernels_ms`: one eager step profiled, the device time of its kernels summed by kind
  (weight products, attention, norms and other elementwise work, reductions, copies and
  indexing, the rest), with the twelve largest kernels by name;
- `bound_ms`: the step's bytes (weights once, the cache span read) over the measured
  bandwidth (`spiral.engines.torch.measure`).
Graph time near the kernels' sum says the GPU is busy and the kernels themselves are
what to shrink or fuse; graph time near the bound says nothing is left. On a machine
without CUDA it runs the eager parts on the CPU (a dry run of the code; no graph, and
the operator times are the CPU's).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections import defaultdict
from typing import Any

import torch
from torch.autograd import DeviceType

from spiral.engines.loading import ModelConfig
from spiral.engines.torch.decode import packed_weights
from spiral.engines.torch.graphs import StaticDecoder, capacity_for
from spiral.engines.torch.loading import load_model_and_tokenizer
from spiral.engines.torch.measure import decode_bytes_per_step, measure_memory_bandwidth
from spiral.engines.torch.prefill import prefill
from spiral.engines.torch.sampler_rows import eval_mode
from spiral.engines.torch.snapshots import TRAINED

KINDS = (  # (kind, substrings of a kernel or operator name), first match wins
    ("attention", ("fmha", "flash", "attention", "sdpa", "softmax")),
    (
        "products",
        ("gemm", "gemv", "xmma", "cutlass", "nvjet", "matmul", "aten::mm", "addmm", "bmm"),
    ),
    ("reductions", ("reduce", "norm", "mean", "aten::sum")),
    ("copies", ("copy", "memcpy", "memset", "index", "cat", "gather", "scatter", "fill")),
    ("elementwise", ("elementwise", "vectorized", "mul", "add", "silu", "neg", "cos", "sin")),
)


def kind_of(name: str) -> str:
    low = name.lower()
    return next((kind for kind, keys in KINDS if any(k in low for k in keys)), "other")


def _median_ms(run: Any, reps: int, device: torch.device) -> float:
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def _kernels(step: Any, device: torch.device) -> dict[str, Any]:
    """One step profiled: device time (CPU time off CUDA) by kind and the top names."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    by_kind: dict[str, float] = defaultdict(float)
    by_name: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        if device.type == "cuda":  # the kernels themselves (operators list them again)
            on_device = event.device_type == DeviceType.CUDA
            us = float(event.self_device_time_total) if on_device else 0.0
        else:  # leaf operators only, so nothing is counted twice
            us = float(event.self_cpu_time_total) if event.key.startswith("aten::") else 0.0
        if us > 0:
            by_kind[kind_of(event.key)] += us / 1000
            by_name[event.key] += us / 1000
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:12]
    return {
        "kernels_ms": dict(by_kind),
        "kernels_total_ms": sum(by_kind.values()),
        "top_kernels_ms": dict(top),
    }


def profile_rows(model: Any, tok: Any, rows: int, bandwidth: float) -> dict[str, Any]:
    device = model.device
    rng = random.Random(rows)
    ordinary = [t for t in range(min(len(tok), 20000)) if t not in set(tok.all_special_ids)]
    prompts = [[rng.choice(ordinary) for _ in range(256)] for _ in range(rows)]
    capture = device.type == "cuda"
    with eval_mode(model), torch.no_grad():
        weights = packed_weights(model, TRAINED, rows=rows)
        assert weights is not None, "the packed step stands aside for this model"
        pre = prefill(model, prompts, 0, tok.pad_token_id, None, logits_to_keep=1)
        capacity = capacity_for(int(pre.mask_BK.shape[1]), 512)
        dtype = pre.cache.layers[0].keys.dtype
        ids_B = pre.out.logits[:, -1].argmax(-1)
        result: dict[str, Any] = {"rows": rows, "capacity": capacity}
        for replayed in (False, True) if capture else (False,):
            decoder = StaticDecoder(weights, rows, capacity, dtype, capture=replayed)
            decoder.load(pre)
            decoder.step(ids_B)  # capture, or warm up
            reps = 50 if replayed else 20
            name = "graph_step_ms" if replayed else "eager_step_ms"
            result[name] = _median_ms(lambda d=decoder: d.step(ids_B), reps, device)
            if not replayed:
                result.update(_kernels(lambda d=decoder: d.step(ids_B), device))
        step_bytes = decode_bytes_per_step(model, rows, 256 + 40)
        result["bound_ms"] = 1000 * step_bytes / bandwidth
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model")
    parser.add_argument("rows", nargs="*", type=int, default=[16, 128])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # the weights as sampling runs them: bf16, a LoRA adapter merged in (merged.py)
    cfg = ModelConfig(args.model, lora_rank=0, device=device, dtype="bfloat16")
    model, tok = load_model_and_tokenizer(cfg, trained=False)
    bandwidth = measure_memory_bandwidth(model.device)
    results = [profile_rows(model, tok, rows, bandwidth) for rows in args.rows]
    report = {"model": args.model, "device": device, "bandwidth": bandwidth, "runs": results}
    print(json.dumps(report, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
