"""Does torch.compile pay off for decode on this CPU? One decode step of the embedded model
(bf16 unless --dtype float32, 16 rows, a 256-token prompt, a static KV cache so that shapes never change), eager
against `torch.compile` (inductor), the two arms interleaved step by step so that load
from other processes falls on both alike.

    python docs/results/engine-compile-decode/compile_decode_ab.py [--freezing] [--dtype float32]

`--freezing` turns on inductor's freezing (weights treated as constants, prepacked for
oneDNN), its documented path for CPU inference. One thread; 40 steps after a 5-step
warm-up of each arm (the compiled arm's first call compiles).
"""

import argparse
import time

import torch
from transformers import AutoModelForCausalLM, StaticCache

from spiral.engines.embedded import ensure_embedded_model

parser = argparse.ArgumentParser()
parser.add_argument("--freezing", action="store_true")
parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
args = parser.parse_args()
torch.set_num_threads(1)
if args.freezing:
    import torch._inductor.config as inductor_config

    inductor_config.freezing = True
model = AutoModelForCausalLM.from_pretrained(
    ensure_embedded_model(), dtype=getattr(torch, args.dtype), attn_implementation="sdpa"
).eval()
B, P, N, WARM = 16, 256, 45, 5
ids = torch.randint(100, 40000, (B, P), generator=torch.Generator().manual_seed(0))
compiled = torch.compile(model.forward, dynamic=False)


def prefill() -> tuple[StaticCache, torch.Tensor]:
    cache = StaticCache(config=model.config, max_cache_len=P + N + 8)
    pos = torch.arange(P).unsqueeze(0).expand(B, -1)
    out = model(
        input_ids=ids,
        position_ids=pos,
        past_key_values=cache,
        use_cache=True,
        cache_position=torch.arange(P),
    )
    return cache, out.logits[:, -1:].argmax(-1)


with torch.inference_mode():
    arms = {"eager": [model.forward, *prefill(), []], "compiled": [compiled, *prefill(), []]}
    for i in range(N):
        for arm in arms.values():
            forward, cache, token, times = arm
            position = torch.tensor([P + i])
            t0 = time.perf_counter()
            out = forward(
                input_ids=token,
                position_ids=position.expand(B, 1),
                past_key_values=cache,
                use_cache=True,
                cache_position=position,
            )
            arm[2] = out.logits[:, -1:].argmax(-1)
            times.append(time.perf_counter() - t0)
    for name, arm in arms.items():
        ts = sorted(arm[3][WARM:])
        print(f"{name}: median {1000 * ts[len(ts) // 2]:.1f} ms, min {1000 * ts[0]:.1f} ms")
    pairs = zip(arms["eager"][3][WARM:], arms["compiled"][3][WARM:], strict=True)
    ratios = sorted(e / c for e, c in pairs)
    print(f"eager / compiled, per step (median): {ratios[len(ratios) // 2]:.2f}")
