"""The claims on the learner's share of the peak, the engines beside the torch one, and
the reliability benchmarks."""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from .core import Check, Row, claim, span, thousands, verdict, words
from .engine import H200

CEILINGS = [
    "docs/results/engine-ceilings/bench-engine-cpu.json",
    "docs/results/engine-ceilings/bench-engine-cpu-run1.json",
]
DTYPES = ("float32", "bfloat16")


@claim("full fine-tuning's learner at")
def full_ft_learner(row: Row) -> list[Check]:
    run = row.json(f"{H200}/bench-learn-qwen3-4b-rank0.json")
    share = run["learn/share_of_matmul_peak"]
    rates = [run["learn/tokens_per_s"], run["learn/tokens_per_s_no_prefix_sharing"]]
    peak = run["learn/model_flops_per_s"] / share / 1e12
    return [
        Check("share of the peak", f"at {share:.2f} of the bf16 matmul peak", "claim"),
        Check("measured peak", f"({peak:.0f} TFLOP/s)", "metric"),
        Check(
            "share of the peak",
            f"{share:.3f} ({thousands(min(rates))}-{thousands(max(rates))} tokens/s",
        ),
        Check(
            "micro-batch", f"micro-batches of {thousands(run['learn/micro_batch_tokens'])} tokens"
        ),
        Check("peak memory", f"peak memory {run['memory/peak_bytes'] / 1e9:.1f} GB"),
    ]


@claim("left-padded learner rows had NaN gradients on CUDA")
def padded_nan(row: Row) -> list[Check]:
    run = row.json(f"{H200}/pack-ab-qwen3-0.6b.json")
    padded, packed = (run["nonfinite_grad_tensors"][arm] for arm in ("padded", "packed"))
    return [Check("non-finite gradients", f"{padded} padded, {packed} packed")]


@claim("on the H100 the torch engine is correct but launch-bound")
def h100(row: Row) -> list[Check]:
    runs = [row.json(p) for p in row.glob("docs/results/engine-h100", "bench-engine-*.json")]
    decode = [r["sample/decode_share_of_bound"] for r in runs]
    learn = [r["learn/share_of_matmul_peak"] for r in runs]
    return [Check("shares", f"decode {span(decode)}; learner {span(learn)}")]


@claim("missed: decode at 0.5 of the bandwidth bound")
def cpu_decode_ceiling(row: Row) -> list[Check]:
    runs = [row.json(p) for p in CEILINGS]
    share = [r[f"{d}/sample/decode_share_of_bound"] for r in runs for d in DTYPES]
    products = [r[f"{d}/sample/decode_products_share_of_bound"] for r in runs for d in DTYPES]
    return [
        Check("share of the bound", f"{span(share)} ({words(len(runs))} runs"),
        Check("products alone", f"products alone reach {span(products, 2)}"),
        verdict(
            "target: 0.5 of the bandwidth bound",
            min(share) >= 0.5,
            "{}: decode at 0.5 of the bandwidth",
            "claim",
        ),
    ]


@claim("missed: learner at 0.75 of the matmul peak")
def cpu_learner_ceiling(row: Row) -> list[Check]:
    runs = [row.json(p) for p in CEILINGS]
    share = [r[f"{d}/learn/share_of_matmul_peak"] for r in runs for d in DTYPES]
    products = [r[f"{d}/learn/share_of_matmul_peak_matmuls_only"] for r in runs for d in DTYPES]
    return [
        Check("share of the peak", f"{span(share)} ({words(len(runs))} runs)"),
        Check("products only", f"would reach {span(products, 2)}"),
        verdict(
            "target: 0.75 of the matmul peak",
            min(share) >= 0.75,
            "{}: learner at 0.75 of the matmul",
            "claim",
        ),
    ]


@claim("faster than TRL's GRPOTrainer")
def trl(row: Row) -> list[Check]:
    data = row.json("docs/results/bench-trl-cpu.json")
    res, ratios = data["results"], data["ratios"]
    return [
        Check("s/step", f"{res['spiral']['seconds']:.1f} vs {res['trl_matched']['seconds']:.1f} s"),
        Check(
            "ratios",
            f"({ratios['speedup_vs_trl_matched']:.1f}x; {ratios['speedup_vs_trl_defaults']:.1f}x against TRL's defaults",
        ),
    ]


def median_steps(rows: list[dict]) -> float:
    return statistics.median(r["time/total"] for r in rows if 1 <= r["step"] <= 4)


@claim("data parallelism and FSDP do not pay on 2 cores")
def dp_fsdp(row: Row) -> list[Check]:
    dp, fsdp = "docs/results/dp-torchrun-cpu", "docs/results/fsdp-torchrun-cpu"
    one = median_steps(row.metrics(f"{dp}/one-process-2-threads.metrics.jsonl"))
    two = median_steps(row.metrics(f"{dp}/torchrun-2-ranks.metrics.jsonl"))
    plain = median_steps(row.metrics(f"{fsdp}/dp-again.metrics.jsonl"))
    sharded = median_steps(row.metrics(f"{fsdp}/fsdp.metrics.jsonl"))
    return [
        Check("torchrun", f"torchrun 2 ranks {one / two:.2f}x one process"),
        Check("FSDP", f"FSDP {plain / sharded:.2f}x data-parallel"),
    ]


@claim("vLLM is slow on this CPU")
def vllm_cpu(row: Row) -> list[Check]:
    ratio = row.json("docs/results/bench-vllm-kuhn-cpu.json")["vllm_over_torch/games_per_s"]
    return [Check("vLLM over torch", f"{ratio:.2f}x")]


@claim("parsers never raise")
def parsers(row: Row) -> list[Check]:
    data = row.json("docs/results/fuzz-parsers.json")
    return [
        Check(
            "calls and replies",
            f"{thousands(data['calls'])} parser calls on {thousands(data['replies'])}",
            "metric",
        ),
        Check(
            "exceptions and worst call",
            f"{data['exceptions']}; worst {max(data['worst_ms'].values()):.0f} ms",
        ),
    ]


@claim("training survives kills and damaged checkpoints")
def fault_injection(row: Row) -> list[Check]:
    data = row.json("docs/results/fault-injection.json")
    signals = sum(data["signals"].values())
    outcome = [
        "metrics equal" if data["metrics_equal"] else "metrics differ",
        "weights bit-identical" if data["final_weights_equal"] else "weights differ",
        "no temporary file left"
        if not data["leftover_temporary_files"]
        else "temporary files left",
    ]
    return [
        Check(
            "what was done",
            f"{signals} signals and {data['damaged_checkpoints']} damaged checkpoints over {data['attempts']} attempts",
            "metric",
        ),
        Check("outcome", ", ".join(outcome)),
    ]


@claim("damaged files, hostile folders and bad requests")
def reliability_probe(row: Row) -> list[Check]:
    data = row.json("docs/results/reliability-probe/2026-12-07-full.json")
    tally = Counter(case["kind"] for case in data["outcomes"].values())  # case by case
    bad = sum(v for k, v in tally.items() if k not in ("recovered", "message"))
    tried = sum(data["generated_cases_tried"].values())
    return [
        Check("cases", f"outcomes of {len(data['outcomes'])} cases", "metric"),
        Check("generated", f"{tried} generated inputs", "metric"),
        Check(
            "families",
            f"{sum(n.startswith('generated:') for n in data['outcomes'])} of them families",
            "metric",
        ),
        Check(
            "tally",
            f"{tally['recovered']} recovered, {tally['message']} one-line refusals; {bad} tracebacks",
        ),
        Check("time", f"one run, {data['seconds']} s"),
    ]


@claim("spiral serve under hostile load")
def serve_load(row: Row) -> list[Check]:
    folder = "docs/results/serve-load/2026-11-28-three-servers"
    runs = {
        n: row.json(f"{folder}/{n}.json")
        for n in ("one-at-a-time", "sliced-calls", "running-batch")
    }
    before, sliced, after = runs.values()

    def loaded(run: dict) -> str:
        return f"{run['small_loaded_s']['p50']:.2f}/{run['small_loaded_s']['p99']:.2f} s"

    errors = sum(v for k, v in after["by_kind_and_status"].items() if " -> 5" in k)
    idle, big, old_big = after["small_idle_s"], after["big_body"], before["big_body"]
    met = after["small_loaded_s"]["p50"] <= 1 and after["small_loaded_s"]["p99"] <= 3
    return [
        Check(
            "before",
            f"{before['requests']} answered, {loaded(before)} small p50/p99 under load, the "
            f"50 MB body {old_big['status']} after {old_big['seconds']:.1f} s",
        ),
        Check("sliced", f"{sliced['requests']} answered, {loaded(sliced)} under load"),
        Check("after", f"{after['requests']} answered, {errors} 5xx"),
        Check(
            "small",
            f"{idle['p50']:.2f}/{idle['p99']:.2f} s alone and {loaded(after)} under load",
        ),
        Check(
            "big body",
            f"the 50 MB body {big['status']} after {big['seconds']:.2f} s with the small "
            f"request beside it {big['small_beside_s']:.2f} s",
        ),
        Check("target", "(target 1/3 s: met)" if met else "(target 1/3 s: missed)"),
        Check(
            "seconds and clients",
            f"{after['seconds']:.0f} s, {after['clients']} clients",
            "metric",
        ),
    ]


@claim("a short request is answered promptly beside a full batch")
def serve_admission(row: Row) -> list[Check]:
    """p50/p99 recomputed from every small request's latency the benchmark kept."""
    from serve_load import percentile

    runs = row.json("docs/results/serve-admission/tiny-32-long-clients.json")["runs"]

    def p50_p99(run: dict[str, Any], key: str) -> tuple[float, float]:
        each = run[key]["each"]
        return percentile(each, 0.5), percentile(each, 0.99)

    def pair(run: dict[str, Any], key: str, digits: int) -> str:
        low, high = p50_p99(run, key)
        return f"{low:.{digits}f}/{high:.{digits}f} s"

    before, after = runs["before"], runs["after"]
    answered = {n: run["by_kind_and_status"] for n, run in runs.items()}
    small = {n: sum(v for k, v in a.items() if k.startswith("small") and k.endswith("200"))
             for n, a in answered.items()}  # fmt: skip
    long = {
        n: sum(v for k, v in a.items() if "256 tokens -> 200" in k) for n, a in answered.items()
    }
    errors = sum(v for a in answered.values() for k, v in a.items() if " -> 5" in k)
    p50, p99 = p50_p99(after, "small_loaded_s")
    return [
        Check(
            "before, loaded",
            f"{pair(before, 'small_loaded_s', 2)} under load ({small['before']} answered)",
        ),
        Check("before, alone", f"{pair(before, 'small_idle_s', 3)} alone"),
        Check(
            "after, loaded",
            f"{pair(after, 'small_loaded_s', 3)} under load ({thousands(small['after'])} answered)",
        ),
        Check("after, alone", f"{pair(after, 'small_idle_s', 3)} alone"),
        verdict("target: p50 <= 1 s, p99 <= 3 s", p50 <= 1 and p99 <= 3, "(target 1/3 s: {})"),
        Check(
            "long replies", f"{thousands(long['before'])} before, {thousands(long['after'])} after"
        ),
        Check("5xx", f"{errors} 5xx"),
    ]
