"""The learner's attention for one layer of the embedded model's shape (bf16, 16 rows of
288 tokens, 9 query heads on 3 key/value heads of 64, causal): torch's fused CPU kernel,
forward and backward, against the parts a flash-style function of plain batched matmuls
would run (the score product with fp32 or bf16 inputs, the probabilities times values).
Best of 5 each, 2 threads. Run from the repository root:

    python docs/results/engine-ceilings/attention_parts.py > docs/results/engine-ceilings/attention-parts.txt
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

ROWS, HEADS, KV_HEADS, TOKENS, DIM = 16, 9, 3, 288, 64


def best_ms(fn: Callable[[], object], reps: int = 5) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * min(times)


def main() -> None:
    torch.manual_seed(0)
    bf16 = torch.bfloat16
    q = torch.randn(ROWS, TOKENS, HEADS, DIM, dtype=bf16).transpose(1, 2).requires_grad_()
    k = torch.randn(ROWS, KV_HEADS, TOKENS, DIM, dtype=bf16).requires_grad_()
    v = torch.randn(ROWS, KV_HEADS, TOKENS, DIM, dtype=bf16).requires_grad_()
    grad = torch.randn(ROWS, HEADS, TOKENS, DIM, dtype=bf16)

    def fused() -> None:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        out.backward(grad)

    def forward_only() -> None:
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    group = HEADS // KV_HEADS
    q_rows = q.detach().reshape(ROWS, KV_HEADS, group * TOKENS, DIM)
    keys, values = k.detach(), v.detach()
    probs = torch.softmax(torch.matmul(q_rows.float(), keys.float().transpose(-1, -2)), -1)
    print(f"fused kernel, forward + backward: {best_ms(fused):.1f} ms")
    print(f"fused kernel, forward alone: {best_ms(forward_only):.1f} ms")
    print(
        "score product, fp32 inputs: "
        f"{best_ms(lambda: torch.matmul(q_rows.float(), keys.float().transpose(-1, -2))):.1f} ms"
    )
    print(
        "score product, bf16 inputs: "
        f"{best_ms(lambda: torch.matmul(q_rows, keys.transpose(-1, -2))):.1f} ms"
    )
    print(
        f"probabilities x values, bf16: {best_ms(lambda: torch.matmul(probs.to(bf16), values)):.1f} ms"
    )


if __name__ == "__main__":
    main()
