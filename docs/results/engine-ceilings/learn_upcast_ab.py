"""The learner (`ab_learner.py`) with its attention as torch's fused CPU kernel in bf16
(what it runs) vs the same kernel on fp32 copies of queries, keys and values; arms
alternating, the first round dropped, with and without prefix sharing; seconds per call
and the relative difference of the two arms' gradients. Run from the repository root:

    PYTHONPATH=docs/results/engine-ceilings python docs/results/engine-ceilings/learn_upcast_ab.py \
        > docs/results/engine-ceilings/learn-upcast-ab.txt
"""

from __future__ import annotations

from typing import Any

import torch
from ab_learner import learner_and_datums, relative, timed_call
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from spiral.engines import attention


def upcast(module: Any, query: Any, key: Any, value: Any, mask: Any, *args: Any, **kw: Any) -> Any:
    if torch.is_grad_enabled() and query.dtype == torch.bfloat16:
        out, _ = sdpa_attention_forward(
            module, query.float(), key.float(), value.float(), mask, *args, **kw
        )
        return out.to(query.dtype), None
    return attention.attention_forward(module, query, key, value, mask, *args, **kw)


def main() -> None:
    learner, datums = learner_and_datums()
    arms = {"bf16 kernel": attention.attention_forward, "fp32 kernel": upcast}
    seconds: dict[tuple[str, bool], list[float]] = {}
    grads = {}
    for rep in range(4):
        for name, forward in arms.items():
            AttentionInterface.register(attention.NAME, forward)
            for share in (False, True):
                learner.share_prefix = share
                s, grads[name, share] = timed_call(learner, datums)
                if rep:
                    seconds.setdefault((name, share), []).append(round(s, 2))
    AttentionInterface.register(attention.NAME, attention.attention_forward)
    for (name, share), values in seconds.items():
        print(f"{name}, prefix sharing {share}: {values} s")
    for share in (False, True):
        diff = relative(grads["bf16 kernel", share], grads["fp32 kernel", share])
        print(f"prefix sharing {share}: gradients differ by {diff:.4f} relative")


if __name__ == "__main__":
    main()
