"""The engine benchmark runs end to end on a tiny model and reports every documented key."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from spiral.engines.loading import ModelConfig
from spiral.engines.torch.loading import load_model_and_tokenizer
from spiral.engines.torch.measure import (
    decode_bytes_per_step,
    decode_flops_per_step,
    run_engine_benchmark,
)

KEYS = (
    "machine/matmul_flops",
    "machine/memory_bandwidth",
    "sample/decode_share_of_bound",
    "sample/decode_share_of_roofline",
    "sample/decode_compute_bound_tokens_per_s",
    "sample/decode_products_share_of_bound",
    "sample/prefill_tokens_per_s",
    "sample/decode_tokens_per_s",
    "sample/speedup_vs_hf_generate",
    "sample/speedup_prefix_reuse",
    "sample/speedup_packed_decode",
    "sample/speedup_run_ahead",
    "learn/micro_batch_tokens",
    "learn/tokens_per_s",
    "learn/tokens_per_s_no_prefix_sharing",
    "learn/speedup_prefix_sharing",
    "learn/share_of_matmul_peak",
)
CPU_KEYS = ("learn/matmul_time_fraction", "learn/share_of_matmul_peak_matmuls_only")


def test_engine_benchmark_reports_every_key(tiny_llama: Path) -> None:
    result = run_engine_benchmark(
        model=str(tiny_llama), batch=4, prompt_tokens=48, new_tokens=4, shared_prefix_tokens=40
    )
    on_cpu = not torch.cuda.is_available()  # the profiled keys are reported on CPUs only
    for key in KEYS + (CPU_KEYS if on_cpu else ()):
        assert result[key] > 0, key
    # Ratios only (no timing thresholds): the sampler generated what it was asked for.
    assert result["sample/generated_tokens"] <= 4 * 4
    assert result["model/parameters"] > 0
    # The roofline's bound is the smaller of the two, so its share is never below the
    # bandwidth share (one measured time over two bounds). Whether the products alone beat
    # a whole step compares two timings, which a busy machine can flip: the benchmark
    # reports it, the test does not assert it.
    assert result["sample/decode_share_of_roofline"] >= result["sample/decode_share_of_bound"]
    if on_cpu:
        assert result["learn/matmul_time_fraction"] < 1.0


def test_decode_bytes_per_step_by_hand(tiny_llama: Path) -> None:
    """The tiny Llama (hidden 64, 2 layers, 4 heads of 16, 2 KV heads, MLP 128, untied
    head of V rows): per layer q 64x64 + k 64x32 + v 64x32 + o 64x64 = 12,288, MLP
    3 x 64x128 = 24,576, two norms 128: 36,992; two layers + final norm 64 = 74,048,
    head 64 V (the input embedding is a lookup, not streamed). KV per position:
    2 (k, v) x 2 layers x 2 heads x 16 x 4 bytes = 512."""
    model, _ = load_model_and_tokenizer(ModelConfig(str(tiny_llama), lora_rank=0, dtype="float32"))
    vocab = model.config.vocab_size
    assert (
        decode_bytes_per_step(model, rows=3, context=10) == 4 * (74_048 + 64 * vocab) + 3 * 10 * 512
    )


def test_decode_flops_per_step_by_hand(tiny_llama: Path) -> None:
    """The tiny Llama's linear weights: 2 x 36,864 per layer (its 36,992 less two norms),
    and the head 64 x V; 2 FLOPs a weight a row. Attention: 4 x 2 layers x 4 heads x 16
    x the context. A LoRA adapter (merged in for sampling) adds no product of its own,
    on the head too."""
    for rank, targets in ((0, "all-linear"), (8, "all-linear"), (8, "q_proj,lm_head")):
        cfg = ModelConfig(
            str(tiny_llama), lora_rank=rank, lora_target_modules=targets, dtype="float32"
        )
        model, _ = load_model_and_tokenizer(cfg)
        vocab = model.config.vocab_size
        expected = 3 * (2 * (73_728 + 64 * vocab) + 4 * 2 * 4 * 16 * 10)
        assert decode_flops_per_step(model, rows=3, context=10) == expected, (rank, targets)


def test_a_dtype_this_cpu_would_emulate_is_refused_before_any_benchmark(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from spiral.bench import cli as bench_cli
    from spiral.engines.torch import cpu
    from spiral.errors import UsageError

    monkeypatch.setattr(cpu, "ASSUME", False)  # a CPU without bf16 kernels

    def never(**_: object) -> dict[str, float]:
        raise AssertionError("a benchmark ran before the dtypes were checked")

    monkeypatch.setattr("spiral.engines.torch.measure.run_engine_benchmark", never)
    args = bench_cli.BenchArgs(what="engine", dtypes="float32,bfloat16")
    with pytest.raises(UsageError, match="dtype=bfloat16: .*dtypes=float32"):
        bench_cli.bench_engine(args)
