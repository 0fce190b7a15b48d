"""The claims on speed: the engine benchmarks on the CPU, the H100 and the H200, the
step-time comparisons, and the other engines."""

from __future__ import annotations

import re
import statistics
from typing import Any

from .core import Check, NoData, Row, claim, f, mean_sd, sci, span, thousands, verdict

CPU_BENCH_FOLDERS = [
    "docs/results/engine-matmul-attention",
    "docs/results/engine-fp32-scores",
    "docs/results/engine-decode-step",
    "docs/results/engine-ceilings",
]
FIRST_BENCH = "docs/results/bench-engine-cpu.json"
H200 = "docs/results/engine-h200"
DECODE_RUNS = [("0.6b", 16), ("0.6b", 128), ("4b", 16), ("4b", 64)]


def benches(row: Row, folders: list[str]) -> list[dict]:
    return [row.json(p) for folder in folders for p in row.glob(folder, "bench-engine-cpu*.json")]


def ratio_span(xs: list[float], digits: int = 1) -> str:
    return span(xs, digits) + "x"


@claim("the async actor-learner is not faster on 2 cores")
def async_bench(row: Row) -> list[Check]:
    key = "async/async_over_sync/games_per_s"
    kuhn = row.json("docs/results/bench-async-kuhn-cpu.json")[key]
    ttt = row.json("docs/results/bench-async-tictactoe-cpu.json")[key]
    return [Check("games/s, async over sync", f"{kuhn:.2f}x (Kuhn), {ttt:.2f}x (TicTacToe)")]


@claim("the sampler beats per-request HF generate")
def sampler(row: Row) -> list[Check]:
    runs = benches(row, ["docs/results/engine-decode-step", "docs/results/engine-ceilings"])
    fp32 = [b["float32/sample/speedup_vs_hf_generate"] for b in runs]
    bf16 = [b["bfloat16/sample/speedup_vs_hf_generate"] for b in runs]
    return [
        Check(
            "speed-up", f"{ratio_span(fp32)} fp32, {ratio_span(bf16)} bf16 ({len(runs)} bench runs"
        )
    ]


@claim("sharing prompt prefixes in the learner")
def prefix_sharing(row: Row) -> list[Check]:
    runs = [row.json(FIRST_BENCH), *benches(row, CPU_BENCH_FOLDERS)]
    fp32 = [b["float32/learn/speedup_prefix_sharing"] for b in runs]
    bf16 = [b["bfloat16/learn/speedup_prefix_sharing"] for b in runs]
    return [
        Check(
            "speed-up", f"{ratio_span(fp32)} fp32, {ratio_span(bf16)} bf16 ({len(runs)} bench runs"
        )
    ]


@claim("the prefix cache across calls")
def prefix_cache(row: Row) -> list[Check]:
    run = row.json("docs/results/bench-prefix-cache-cpu.json")["budget_4096_mb"]
    same = "identical tokens" if run["prefix_cache/identical_tokens"] == 1.0 else "different tokens"
    return [Check("speed-up", f"{run['prefix_cache/speedup']:.2f}x, {same}")]


@claim("our own decode step")
def decode_step(row: Row) -> list[Check]:
    text = row.text("docs/results/engine-decode-step/decode-step-ab.txt")
    ms = dict(re.findall(r"^(\w+): median ([\d.]+) ms", text, re.MULTILINE))
    forward, ours = float(ms["model_forward"]), float(ms["packed"])
    return [Check("ms a step", f"{forward:.1f} vs {ours:.1f} ms ({forward / ours:.2f}x")]


@claim("bf16 learns faster than fp32")
def bf16_over_fp32(row: Row) -> list[Check]:
    key = "bf16_over_fp32/learn/tokens_per_s"
    xs = [b[key] for b in benches(row, CPU_BENCH_FOLDERS)]
    return [
        Check(
            "since the LoRA-precision change",
            f"{mean_sd(xs, 2)}, range {span(xs, 2)} ({len(xs)} bench runs",
        ),
        Check("before it", f"{row.json(FIRST_BENCH)[key]:.2f} before it"),
    ]


def elapsed_min(text: str) -> tuple[str, float]:
    """GNU time's wall clock as minutes:seconds, and in seconds."""
    clock = re.search(r"Elapsed \(wall clock\) time .*: ([\d:.]+)", text)
    if clock is None:
        raise NoData("no wall clock in the time file")
    parts = [float(x) for x in clock.group(1).split(":")]
    seconds = sum(x * 60**i for i, x in enumerate(reversed(parts)))
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}", seconds


def peak_gb_of(rows: list[dict[str, Any]], where: str = "the metrics") -> float:
    """The largest per-step peak (`perf/peak_rss_mb`, MiB) in GB (1e9 bytes): GNU time's
    maximum is only the last window, since the loop resets the peak every step."""
    peaks = [r["perf/peak_rss_mb"] for r in rows if "perf/peak_rss_mb" in r]
    if not peaks:
        raise NoData(f"{where} has no perf/peak_rss_mb")
    return max(peaks) * 2**20 / 1e9


@claim("make train got faster and smaller")
def side_by_side(row: Row) -> list[Check]:
    folder = "docs/results/make-train-side-by-side"
    (b_clock, b_s), (a_clock, a_s) = (
        elapsed_min(row.text(f"{folder}/{n}.time.txt")) for n in ("before", "after")
    )
    peak = [
        max(
            r["perf/peak_rss_mb"]
            for r in row.metrics(f"{folder}/{n}.metrics.jsonl")
            if "perf/peak_rss_mb" in r
        )
        for n in ("before", "after")
    ]
    return [
        Check("wall time", f"{b_clock} -> {a_clock} min ({b_s / a_s:.2f}x)"),
        Check("peak step memory", f"{thousands(peak[0])} -> {thousands(peak[1])} MB"),
    ]


@claim("sampling with the LoRA adapter merged in")
def merged(row: Row) -> list[Check]:
    kuhn = row.json("docs/results/merged-lora/merge-ab-kuhn.json")["speedup"]
    ttt = row.json("docs/results/merged-lora/merge-ab-tictactoe.json")["speedup"]
    gpu = row.json("docs/results/engine-h100/merge-gpu.json")
    adapter = min(r["sample_s"] for r in gpu["adapter"])
    merged_s = min(r["sample_s"] for r in gpu["merged"])
    return [
        Check("CPU", f"{kuhn:.2f}x (Kuhn), {ttt:.2f}x (TicTacToe) on CPU"),
        Check("H100", f"{adapter / merged_s:.1f}x on the H100"),
    ]


@claim("full fine-tuning keeps its updates at lr 1e-6")
def full_ft_precision(row: Row) -> list[Check]:
    data = row.json("docs/results/full-ft-precision/embedded-cpu.json")
    return [
        Check("fp32 masters", f"{data['share_moved_fp32_master']:.3f} with fp32 master weights"),
        Check(
            "bf16 weights",
            f"{data['share_moved_if_kept_in_bf16']:.3f} if the weights were kept in bf16",
        ),
    ]


def unchanged(
    row: Row, folder: str, pairs: list[tuple[str, str]]
) -> tuple[str, list[float], list[float]]:
    """Whether every metric is equal in each before/after pair, and the median step time
    (steps 1-11) of each arm."""
    equal, before, after = True, list[float](), list[float]()
    for b, a in pairs:
        rows_b, rows_a = (row.metrics(f"{folder}/{n}.metrics.jsonl") for n in (b, a))
        for x, y in zip(rows_b, rows_a, strict=True):
            keys = {k for k in set(x) | set(y) if not k.startswith(("time", "perf/", "progress/"))}
            equal &= all(x.get(k) == y.get(k) for k in keys)
        for rows, out in ((rows_b, before), (rows_a, after)):
            out.append(statistics.median(r["time/total"] for r in rows if 1 <= r["step"] <= 11))
    return ("every metric equal at every step" if equal else "metrics differ"), before, after


@claim("the run-ahead decode, span attention and micro-batch sizing")
def run_ahead(row: Row) -> list[Check]:
    pairs = [("before", "after"), ("before-swapped", "after-swapped")]
    same, before, after = unchanged(row, "docs/results/make-train-unchanged-by-run-ahead", pairs)
    b, a = statistics.fmean(before), statistics.fmean(after)
    # before ran on core 0 then 1, after on core 1 then 0: core 1 over core 0 in each
    core = [before[1] / before[0], after[0] / after[1]]
    return [
        Check("metrics", same),
        Check(
            "median step",
            f"median step {b:.1f} s before, {a:.1f} s after over the two pairs ({a / b:.2f}x",
        ),
        Check("the core", f"core 1 was {span(core, 2)}x slower than core 0 in both pairs"),
    ]


@claim("the GPU path left make train on CPU as it was")
def gpu_path(row: Row) -> list[Check]:
    same, (b,), (a,) = unchanged(
        row, "docs/results/make-train-unchanged-by-gpu-path", [("before", "after")]
    )
    return [
        Check("metrics", same),
        Check("median step", f"median step {b:.1f} s before, {a:.1f} s after ({a / b:.2f}x)"),
    ]


@claim("packing the learner's rows into one sequence")
def packing(row: Row) -> list[Check]:
    run = row.json("docs/results/learner-packing/embedded-cpu.json")
    test = re.search(
        r"gradients \(to (1e-\d+) in fp32\)", row.text("tests/engines/test_packing.py")
    )
    if test is None:
        raise NoData("tests/engines/test_packing.py no longer states its fp32 tolerance")
    return [
        Check("packed over padded", f"packed {run['speedup_packed']:.2f}x (one run)"),
        Check(
            "gradients",
            f"equal to {sci(run['max_grad_difference'])} in bf16 ({test.group(1)} in fp32, tested)",
        ),
    ]


@claim("on the H200 the decode step replayed as CUDA graphs")
def h200_graphs(row: Row) -> list[Check]:
    runs = {(s, n): row.json(f"{H200}/bench-decode-qwen3-{s}-rows{n}.json") for s, n in DECODE_RUNS}
    speedups = [r["sample/speedup_packed_decode"] for r in runs.values()]
    rate = {k: thousands(r["sample/decode_tokens_per_s"]) for k, r in runs.items()}
    return [
        Check("graphs over the eager forward", ratio_span(speedups), "claim"),
        Check("0.6B", f"{rate['0.6b', 16]} (16 rows), {rate['0.6b', 128]} (128)"),
        Check("4B", f"{rate['4b', 16]} (16), {rate['4b', 64]} (64)"),
    ]


@claim("missed: decode at 5,000 tokens/s")
def h200_missed(row: Row) -> list[Check]:
    runs = [row.json(f"{H200}/bench-decode-qwen3-{s}-rows{n}.json") for s, n in DECODE_RUNS]
    share = [f(r["sample/decode_share_of_bound"]) for r in runs]
    products = " / ".join(f"{r['sample/decode_products_share_of_bound']:.2f}" for r in runs)
    return [
        Check(
            "0.6B",
            f"0.6B: {thousands(runs[0]['sample/decode_tokens_per_s'])} tokens/s, {share[0]} (16 rows), {share[1]} (128 rows)",
        ),
        Check("4B", f"4B: {share[2]} (16 rows), {share[3]} (64 rows)"),
        Check("products", f"products alone reach {products}"),
        verdict(
            "targets: 5,000 tokens/s (0.6B, 16 rows), 0.4 of the bandwidth bound",
            runs[0]["sample/decode_tokens_per_s"] >= 5000
            and min(r["sample/decode_share_of_bound"] for r in runs) >= 0.4,
            "{}: decode at 5,000 tokens/s (0.6B, 16 rows) and at 0.4-0.5 of the bandwidth bound",
            "claim",
        ),
    ]
