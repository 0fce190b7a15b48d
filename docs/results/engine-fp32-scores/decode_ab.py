"""Decode with the matmul attention's scores from fp32 q and k (the kept version)
vs from the bf16 product (the first version), in one process on the same model and prompts:
16 rows of the embedded model in bf16, 64 new tokens each, arms alternating, 3 reps.
`python decode_ab.py OUT.json`."""

from __future__ import annotations

import json
import sys
import time

import torch

import spiral.engines.torch.attention as attention
from spiral.engines.base import SamplingParams
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.loading import load_model_and_tokenizer
from spiral.engines.torch.sampler import TorchSampler

fp32_scores = attention.matmul_attention


def bf16_scores(q, k, v, mask, scaling, causal):  # type: ignore[no-untyped-def]
    """The first version's product: q k^T in bf16, then cast (the rest as now)."""
    batch, heads, q_len, dim = q.shape
    kv_heads, k_len = k.shape[1], k.shape[2]
    group = heads // kv_heads
    q_r = q.reshape(batch, kv_heads, group * q_len, dim)
    scores = torch.matmul(q_r, k.transpose(-1, -2)).float() * scaling
    if mask is None and causal and q_len > 1:
        mask = torch.ones(q_len, k_len, dtype=torch.bool).tril()
    if mask is not None:
        m = attention._stacked(mask, batch, group, q_len, k_len)
        if m.dtype == torch.bool:
            scores = scores.masked_fill(~m, torch.finfo(torch.float32).min)
        else:
            scores = (scores + m.float()).clamp(min=torch.finfo(torch.float32).min)
    probs = torch.softmax(scores, dim=-1).to(v.dtype)
    return torch.matmul(probs, v).reshape(batch, heads, q_len, dim).transpose(1, 2).contiguous()


model, tok = load_model_and_tokenizer(ModelConfig("embedded", lora_rank=16, dtype="bfloat16"))
sampler = TorchSampler(model, tok)
text = "You are playing Tic Tac Toe. Describe a good opening move and why. " * 12
prompts = [tok(f"{k}: {text}")["input_ids"][:256] for k in range(16)]
params = SamplingParams(max_tokens=64, temperature=1.0, seed=0)
arms = {"bf16 scores (s12)": bf16_scores, "fp32 scores (s13)": fp32_scores}
seconds: dict[str, list[float]] = {name: [] for name in arms}
for rep in range(4):  # rep 0 warms up
    for name, fn in arms.items():
        attention.matmul_attention = fn
        start = time.perf_counter()
        out = sampler.sample(prompts, params)
        took = time.perf_counter() - start
        if rep:
            seconds[name].append(took)
tokens = sum(len(c.tokens) for c in out)
report = {
    name: {"best_s": min(s), "all_s": s, "tokens": tokens, "tokens_per_s": tokens / min(s)}
    for name, s in seconds.items()
}
print(json.dumps(report, indent=1))
with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump(report, f, indent=1)
