"""The torch engine's own measurements (`spiral bench what=engine`): sampling
prefill/decode speed, prefix-reuse gain, learner throughput. They live with the engine
because they time its parts (the packed decode step's products, run-ahead, prefix reuse);
`spiral bench` calls `run_engine_benchmark` and formats what it returns.

`run_engine_benchmark()` returns one flat dict of floats (prints nothing; `spiral bench`
formats it). Workload: `batch` prompts of `prompt_tokens` random ordinary tokens whose
first `shared_prefix_tokens` are identical (like the rules text every game of one id
shares), `new_tokens` sampled per prompt at temperature 1.

Keys (rates in tokens/s):
- `sample/prefill_tokens_per_s`: prompt tokens / prefill time, counting the shared prefix
  once per row as the caller sees it (the effective rate with prefix reuse);
  `sample/prefill_computed_tokens_per_s`: tokens actually run through the model / time.
- `sample/decode_tokens_per_s`: generated tokens / decode-loop time (the sampler as it
  runs: `engines/torch/decode.py`'s packed step where it applies, on CUDA replayed as
  CUDA graphs, `engines/torch/graphs.py`);
  `sample/decode_tokens_per_s_model_forward`: the same call decoded by the model's own
  forward (`packed_decode=False`), and `sample/speedup_packed_decode` their ratio;
  `sample/speedup_run_ahead`: the tree decode's time, which reads every token back to
  the host, over the sampler's as it runs, for the same completions
  (`engines/torch/runahead.py`; ~1 on a CPU, where only CUDA graphs run ahead).
- `sample/speedup_vs_hf_generate`: generated tokens per second of our batched sampler
  (prefill + decode) over a loop of per-request `model.generate` calls with KV cache (the
  first `HF_REQUESTS` prompts: a per-request rate);
  `sample/speedup_prefix_reuse`: the same sampler with vs without prefix reuse.
- `learn/tokens_per_s`: forward_backward over the prompts + completions, the shared
  prompt prefix computed once per micro-batch (the learner's default);
  `learn/tokens_per_s_no_prefix_sharing`: every row computed in full;
  `learn/speedup_prefix_sharing`: the ratio of the two.
- `sample/decode_share_of_bound`: decode tokens/s over the memory-bandwidth bound
  `batch x machine/memory_bandwidth / sample/decode_bytes_per_step` (every weight and
  each row's KV read once per step; `decode_bytes_per_step`).
- The roofline beside it: `sample/decode_compute_bound_tokens_per_s` is
  `batch x machine/matmul_flops / sample/decode_flops_per_step` (`decode_flops_per_step`),
  and `sample/decode_share_of_roofline` is decode tokens/s over the smaller of the two
  bounds: where a step's FLOPs per byte read exceed the machine's FLOPs per byte of
  bandwidth, decode is bound by compute and the bandwidth bound cannot be reached.
- `sample/decode_products_share_of_bound`: one step's matrix products alone (the packed
  step's prepacked linears, `engines/torch/decode.py`, on random inputs of `batch` rows; median of 5)
  as a share of the bandwidth bound: the most any decode of these kernels can reach,
  with norms, rotary, attention and sampling taking no time at all. Absent where the
  packed step stands aside for the model.
- `machine/memory_bandwidth`: bytes/s of a reduction over a 1 GiB buffer (best of 5).
- `memory/peak_bytes`: the most memory the run held: on CUDA the allocator's peak
  (`torch.cuda.max_memory_allocated`), on a CPU the process's peak resident set;
  `memory/peak_bytes_sampling`: the same, read before the learner's first step. On CUDA
  both count from after the machine measurements; a CPU's resident-set peak cannot be
  reset, so there they include them.
- `machine/matmul_flops`: measured peak of a large matmul in the model's dtype;
  `learn/share_of_matmul_peak`: `learn/model_flops_per_s` / that peak, where model
  FLOPs = tokens x (4 with LoRA, 6 with full fine-tuning) x non-embedding parameters,
  from the run without prefix sharing (where every counted token is really computed);
  `learn/micro_batch_tokens`: the learner's micro-batch budget (`micro_batch_tokens=0`:
  sized to the free memory on a GPU, `engines/torch/memory.py`; 4096 on a CPU).
- `learn/matmul_time_fraction` (CPUs only): the share of the operator time of one more
  such call, profiled, spent in matrix products (`aten::mm`, `bmm`, `addmm`, `baddbmm`),
  and `learn/share_of_matmul_peak_matmuls_only`: the same model FLOPs over the profiled
  products' own time, as a share of the peak: what the learner would reach if everything
  but its products (norms, activations, attention, LoRA's adds, the loss, autograd's
  bookkeeping) took no time.
Timings on a shared machine vary with its load; compare runs on the same machine only.
On CUDA every timed workload first runs once untimed at full size (the sampler on other
prompts of the same shape, so its prefix cache does not serve the timed call): the first
call of a shape there picks kernels and grows the allocator, which made the first of two
sampler variants look 1.6x slower on an H100.
"""

from __future__ import annotations

import random
import time
from typing import Any

import torch

from spiral.engines.base import SamplingParams
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.learner import TorchLearner
from spiral.engines.torch.precision import compute_dtype
from spiral.engines.torch.sampler import TorchSampler
from spiral.types import Datum


def sync_device(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _warms_up_at_full_size(device: torch.device) -> bool:
    """Whether each timed workload first runs once untimed at full size (module docstring)."""
    return device.type == "cuda"


def measure_matmul_flops(
    device: torch.device, seconds: float = 1.0, dtype: torch.dtype | None = None
) -> float:
    """FLOP/s of repeated square matmuls in `dtype` (default fp32 on CPU, bf16 on CUDA)."""
    n = 4096 if device.type == "cuda" else 1024
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    torch.matmul(a, b)  # warm-up (allocations, kernel selection)
    sync_device(device)
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.matmul(a, b)
        reps += 1
        if device.type == "cuda" and reps % 10:
            continue
        sync_device(device)
    sync_device(device)
    return 2.0 * n**3 * reps / (time.perf_counter() - start)


def measure_memory_bandwidth(device: torch.device, mib: int = 1024, reps: int = 5) -> float:
    """Bytes/s read by a reduction over a `mib` MiB buffer (best of `reps`): the rate at
    which decode can stream weights and KV, since every decode step reads them all."""
    x = torch.ones(mib * (1 << 20) // 4, device=device, dtype=torch.float32)
    x.sum()  # warm-up (page faults)
    best = float("inf")
    for _ in range(reps):
        sync_device(device)
        start = time.perf_counter()
        x.sum()
        sync_device(device)
        best = min(best, time.perf_counter() - start)
    return x.numel() * x.element_size() / best


def decode_bytes_per_step(model: Any, rows: int, context: float) -> float:
    """Bytes one decode step must read: every weight once (the head reads the whole
    vocab matrix, tied or not; an embedding lookup reads one row per token, ignored) and
    each row's KV over `context` positions."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    head = model.get_output_embeddings().weight
    embed = model.get_input_embeddings().weight
    if head.data_ptr() != embed.data_ptr():  # untied: the input embedding is not streamed
        weights -= embed.numel() * embed.element_size()
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    kv_per_token = 2 * cfg.num_hidden_layers * kv_heads * head_dim * head.element_size()
    return float(weights + rows * context * kv_per_token)


def decode_flops_per_step(model: Any, rows: int, context: float) -> float:
    """Floating-point operations of one decode step: per row 2 per weight of every linear
    layer (the head's included, the embedding lookup and the norms not) and, per layer,
    4 x query heads x head dim x `context` for the attention's two products."""
    weights = {
        id(m.weight): m.weight.numel()
        for name, m in model.named_modules()
        # a PEFT model's LoRA factors are merged in for sampling: not products of their own
        if isinstance(m, torch.nn.Linear)
        and not any(p.startswith("lora_") for p in name.split("."))
    }
    head = model.get_output_embeddings().weight  # a head LoRA wraps is counted once
    weights.setdefault(id(head), head.numel())
    linear = sum(weights.values())
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    attention = 4 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim * context
    return float(rows * (2 * linear + attention))


def _time_decode_products(model: Any, rows: int, reps: int = 5) -> float | None:
    """Seconds one decode step's matrix products take alone (module docstring), median of
    `reps`; None where the packed step stands aside for this model."""
    from contextlib import nullcontext

    from spiral.engines.torch.decode import drop_packed, packed_weights

    name = "benchmark-products"  # its own slot (it may push out the least recent one)
    base_weights = model.disable_adapter() if hasattr(model, "disable_adapter") else nullcontext()
    with base_weights:  # the shapes the merged adapter would have
        weights = packed_weights(model, name, rows=rows)
    if weights is None:
        return None
    try:
        cfg, device = model.config, model.device
        dtype = model.get_output_embeddings().weight.dtype
        hidden = torch.randn(rows, cfg.hidden_size, device=device, dtype=dtype)
        attn = torch.randn(rows, weights.heads * weights.head_dim, device=device, dtype=dtype)
        inner = torch.randn(rows, cfg.intermediate_size, device=device, dtype=dtype)
        times = []
        with torch.inference_mode():
            for _ in range(reps + 1):
                sync_device(device)
                start = time.perf_counter()
                for layer in weights.layers:
                    layer.qkv(hidden), layer.o(attn), layer.gate_up(hidden), layer.down(inner)
                weights.head(hidden)
                sync_device(device)
                times.append(time.perf_counter() - start)
        return sorted(times[1:])[reps // 2]  # the first call warms up
    finally:
        drop_packed(model, name)


def _profiled_products(learner: TorchLearner, datums: list[Datum]) -> tuple[float, float]:
    """One forward_backward under torch's profiler: the seconds of its matrix products
    (self CPU time) and their share of all operators' self time."""
    products = {"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm"}
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        learner.forward_backward(datums, _benchmark_loss)
    learner.model.zero_grad(set_to_none=True)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    in_products = sum(e.self_cpu_time_total for e in events if e.key in products)
    return in_products / 1e6, in_products / total


def _decode_bounds(
    model: Any, batch: int, context: float, machine: dict[str, float], decode_rate: float
) -> dict[str, float]:
    """`decode_rate` against the bounds of `batch` rows at `context` positions on this
    machine (its `machine/*` keys): bandwidth, compute, and the products' own time
    (module docstring)."""
    bytes_per_step = decode_bytes_per_step(model, batch, context)
    flops_per_step = decode_flops_per_step(model, batch, context)
    bound = batch * machine["machine/memory_bandwidth"] / bytes_per_step
    compute_bound = batch * machine["machine/matmul_flops"] / flops_per_step
    out = {
        "sample/decode_bytes_per_step": bytes_per_step,
        "sample/decode_bound_tokens_per_s": bound,
        "sample/decode_share_of_bound": decode_rate / bound,
        "sample/decode_flops_per_step": flops_per_step,
        "sample/decode_compute_bound_tokens_per_s": compute_bound,
        "sample/decode_share_of_roofline": decode_rate / min(bound, compute_bound),
    }
    products_s = _time_decode_products(model, batch)
    if products_s is not None:
        out["sample/decode_products_share_of_bound"] = batch / products_s / bound
    return out


def _prompts(
    vocab: int, special: set[int], batch: int, length: int, shared: int, seed: int
) -> list[list[int]]:
    rng = random.Random(seed)
    ordinary = [t for t in range(min(vocab, 20000)) if t not in special]
    prefix = [rng.choice(ordinary) for _ in range(min(shared, length))]
    return [
        prefix + [rng.choice(ordinary) for _ in range(length - len(prefix))] for _ in range(batch)
    ]


def _time_sampler(
    sampler: TorchSampler, prompts: list[list[int]], new_tokens: int
) -> tuple[dict[str, float], float, list[Any]]:
    params = SamplingParams(max_tokens=new_tokens, temperature=1.0, seed=0)
    start = time.perf_counter()
    completions = sampler.sample(prompts, params)
    sync_device(sampler.model.device)
    return dict(sampler.last_stats), time.perf_counter() - start, completions


HF_REQUESTS = 4  # per-request `generate` calls timed, after one untimed: a per-request rate


def _time_hf_generate(
    model: Any, prompts: list[list[int]], new_tokens: int, pad: int
) -> tuple[float, int]:
    """Per-request `generate` (KV cache on, sampling): seconds, generated tokens; the
    first prompt runs once untimed first (its one-time costs are not a request's)."""
    device = model.device

    @torch.inference_mode()
    def generate(prompt: list[int]) -> int:
        ids_1T = torch.tensor([prompt], device=device)
        out = model.generate(
            input_ids=ids_1T,
            attention_mask=torch.ones_like(ids_1T),
            max_new_tokens=new_tokens,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            pad_token_id=pad,
        )
        return int(out.shape[1] - ids_1T.shape[1])

    generate(prompts[0])
    sync_device(device)
    start = time.perf_counter()
    generated = sum(generate(prompt) for prompt in prompts)
    sync_device(device)
    return time.perf_counter() - start, generated


def _learner_datums(prompts: list[list[int]], completions: list[Any]) -> list[Datum]:
    datums = []
    for prompt, completion in zip(prompts, completions, strict=True):
        seq = list(prompt) + list(completion.tokens)
        n_prompt = len(prompt) - 1
        n_done = len(completion.tokens)
        datums.append(
            Datum(
                input_ids=tuple(seq[:-1]),
                target_ids=tuple(seq[1:]),
                sampler_logprobs=(0.0,) * n_prompt + tuple(completion.logprobs),
                advantages=(0.0,) * n_prompt + (1.0,) * n_done,
                mask=(0.0,) * n_prompt + (1.0,) * n_done,
            )
        )
    return datums


def _benchmark_loss(
    new_T: torch.Tensor, old_T: torch.Tensor, adv_T: torch.Tensor, mask_T: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    return -(adv_T * torch.exp(new_T - old_T) * mask_T).sum(), {}


def _time_learner(
    learner: TorchLearner, datums: list[Datum], lora_rank: int, peak: float
) -> dict[str, float]:
    """forward_backward over `datums` with and without prefix sharing; rates, and model
    FLOPs as a share of the matmul `peak`."""
    device = learner.model.device
    tokens = float(sum(len(d.input_ids) for d in datums))
    learn_s = {}
    for share in (False, True):
        learner.share_prefix = share
        if _warms_up_at_full_size(device):
            learner.forward_backward(datums, _benchmark_loss)
            learner.model.zero_grad(set_to_none=True)
            sync_device(device)
        start = time.perf_counter()
        learner.forward_backward(datums, _benchmark_loss)
        sync_device(device)
        learn_s[share] = time.perf_counter() - start
        learner.model.zero_grad(set_to_none=True)  # each call from cleared gradients
    params = float(sum(p.numel() for p in learner.model.parameters()))
    # Work per token: forward 2N + input-gradient backward 2N over the N non-embedding
    # weights (an embedding lookup is not a matmul; the tied head runs only on trained
    # positions), plus 2N weight gradients when the base weights train (lora_rank=0).
    embedding = float(learner.model.get_input_embeddings().weight.numel())
    flops = (4.0 if lora_rank > 0 else 6.0) * (params - embedding) * tokens
    profiled = {}
    if device.type == "cpu":
        learner.share_prefix = False
        products_s, fraction = _profiled_products(learner, datums)
        profiled["learn/matmul_time_fraction"] = fraction
        profiled["learn/share_of_matmul_peak_matmuls_only"] = flops / products_s / peak
    learner.share_prefix = True
    return {
        "learn/tokens_per_s": tokens / learn_s[True],
        "learn/tokens_per_s_no_prefix_sharing": tokens / learn_s[False],
        "learn/speedup_prefix_sharing": learn_s[False] / learn_s[True],
        "learn/seconds": learn_s[True],
        "learn/model_flops_per_s": flops / learn_s[False],
        "learn/share_of_matmul_peak": flops / learn_s[False] / peak,
        "learn/micro_batch_tokens": float(learner.micro_batch_tokens),
        "model/parameters": params,
        **profiled,
    }


def run_engine_benchmark(
    model: str = "embedded",
    batch: int = 16,
    prompt_tokens: int = 256,
    new_tokens: int = 32,
    shared_prefix_tokens: int = 192,
    lora_rank: int = 32,
    seed: int = 0,
    dtype: str = "float32",
) -> dict[str, float]:
    """Measure the local torch engine on `model` in `dtype`; see the module docstring."""
    learner = TorchLearner(
        ModelConfig(model=model, lora_rank=lora_rank, seed=seed, dtype=dtype),
        micro_batch_tokens=0,  # sized to the free memory on a GPU, as `spiral train` does
    )
    device = learner.model.device
    tok = learner.tokenizer
    special = set(getattr(tok, "all_special_ids", []))
    prompts = _prompts(len(tok), special, batch, prompt_tokens, shared_prefix_tokens, seed)
    # The dtype the products run in: full fine-tuning's fp32 weights compute in bf16.
    weight_dtype = learner.model.get_output_embeddings().weight.dtype
    product_dtype = compute_dtype(learner.model) or weight_dtype
    result: dict[str, float] = {
        "machine/matmul_flops": measure_matmul_flops(device, dtype=product_dtype),
        "machine/memory_bandwidth": measure_memory_bandwidth(device),
    }
    if device.type == "cuda":  # the two measurements' buffers are not the engine's
        torch.cuda.reset_peak_memory_stats(device)

    sampler = learner.sampler()
    plain = TorchSampler(learner.model, tok, prefix_reuse=False)
    _time_sampler(sampler, prompts[:2], 2)  # warm-up
    if _warms_up_at_full_size(device):  # on other prompts of the same shape
        others = _prompts(len(tok), special, batch, prompt_tokens, shared_prefix_tokens, seed + 1)
        _time_sampler(sampler, others, new_tokens)
        _time_sampler(plain, others, new_tokens)
    stats, reuse_s, completions = _time_sampler(sampler, prompts, new_tokens)
    sampler.run_ahead = False  # the tree decode: one host read per token
    tree_stats, _, _ = _time_sampler(sampler, prompts, new_tokens)
    sampler.run_ahead = True
    sampler.packed_decode = False
    forward_stats, _, _ = _time_sampler(sampler, prompts, new_tokens)
    sampler.packed_decode = True
    _, plain_s, plain_completions = _time_sampler(plain, prompts, new_tokens)
    # Per request, so its rate does not depend on how many: at most HF_REQUESTS of them.
    hf_s, hf_tokens = _time_hf_generate(
        learner.model, prompts[:HF_REQUESTS], new_tokens, sampler.pad_id
    )
    decode_rate = stats["decode_tokens"] / stats["decode_s"]
    forward_rate = forward_stats["decode_tokens"] / forward_stats["decode_s"]
    ours_rate = sum(len(c.tokens) for c in completions) / reuse_s
    plain_rate = sum(len(c.tokens) for c in plain_completions) / plain_s
    result.update(
        {
            "sample/prefill_tokens_per_s": stats["prompt_tokens"] / stats["prefill_s"],
            "sample/prefill_computed_tokens_per_s": stats["prefill_tokens"] / stats["prefill_s"],
            "sample/decode_tokens_per_s": decode_rate,
            "sample/decode_tokens_per_s_model_forward": forward_rate,
            "sample/speedup_packed_decode": decode_rate / forward_rate,
            "sample/speedup_run_ahead": tree_stats["decode_s"] / stats["decode_s"],
            **_decode_bounds(
                learner.model, batch, prompt_tokens + new_tokens / 2, result, decode_rate
            ),
            "sample/generated_tokens": float(sum(len(c.tokens) for c in completions)),
            "sample/seconds": reuse_s,
            "sample/seconds_no_prefix_reuse": plain_s,
            "sample/seconds_hf_generate": hf_s,
            "sample/speedup_vs_hf_generate": ours_rate / (hf_tokens / hf_s),
            "sample/speedup_prefix_reuse": ours_rate / plain_rate,
        }
    )

    result["memory/peak_bytes_sampling"] = peak_memory_bytes(device)  # before any learning
    peak = result["machine/matmul_flops"]
    datums = _learner_datums(prompts, completions)
    result.update(_time_learner(learner, datums, lora_rank, peak))
    result["memory/peak_bytes"] = peak_memory_bytes(device)
    return result


def peak_memory_bytes(device: torch.device) -> float:
    """The CUDA allocator's peak on a GPU; the process's peak resident set on a CPU."""
    if device.type == "cuda":
        return float(torch.cuda.max_memory_allocated(device))
    import resource

    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)  # KiB on Linux
