"""Attention for the torch engine: plain matmuls where torch's fused CPU kernel is slow.

transformers picks an attention function by name (`config._attn_implementation`); we
register one more, `spiral`, and switch models to it when they use `sdpa`. It is `sdpa`
except on a CPU in bf16/fp16, where it computes attention as two batched matmuls with an
fp32 softmax. Measured on this project's CPU (AMD EPYC with AVX512-BF16, torch 2.13,
2 threads; `docs/results.md`, "Decode"): torch's fused CPU attention in bf16 took
~2.5 ms per layer for one decode token of 16 rows (SmolLM2-135M shapes), so a 30-layer
decode step spent most of its ~165 ms there; with the matmuls it takes ~79 ms. In fp32
the fused kernel is as fast or faster, so fp32 keeps it.

Only for small score matrices without autograd. Under autograd the matmuls keep every
fp32 score matrix for the backward pass, O(tokens^2) per layer, where sdpa keeps
O(tokens): a TicTacToe population-play run peaked at 10.2 GB resident per step with them
in the learner and at 7.2 GB without (~30 prompts of ~126 new tokens per micro-batch),
and the learner's attention was ~7% of its step. Without autograd the scores of one
layer live only while it runs, but a long prefill (prompts of thousands of tokens, or
scoring chunks of 32k tokens) would still make them large, so the matmuls run only when
one layer's fp32 scores take at most `MAX_SCORE_BYTES` (64 MB: every decode step, and
prefills of a few hundred tokens over a batch); larger ones go to sdpa, whose kernel
works in blocks.

The matmul path groups query heads by their key/value head (grouped-query attention
without repeating keys and values), takes transformers' boolean mask (True = attend;
None means "every key" for one query token and "causal" otherwise, as transformers'
sdpa mask leaves itself out), computes the scores from fp32 copies of queries and keys (a bf16 product rounds scores of
~30 to steps of 0.125, far coarser than sdpa, which accumulates in fp32), the softmax in
fp32, and returns the output in
the model's dtype. Dropout, soft-capping and position biases go to `sdpa` unchanged.

Under autograd, a query that sees no key (a left pad) is let see every key before sdpa
runs (`no_blind_queries`): its output is never read, but CUDA's sdpa backward turns a
fully masked row into NaN gradients.

On a CPU in fp32, sdpa takes grouped query heads as they are (`enable_gqa`,
`_sdpa_grouped`) instead of keys and values repeated per query head: transformers'
numbers bit for bit, without the copies the backward pass kept.
"""

from __future__ import annotations

from typing import Any

import torch

NAME = "spiral"
MAX_SCORE_BYTES = 64 << 20  # one layer's fp32 scores, above which sdpa runs (docstring)


def _use_matmul(
    query: torch.Tensor, key: torch.Tensor, dropout: float, kwargs: dict[str, Any]
) -> bool:
    batch, heads, q_len, _ = query.shape
    return (
        not torch.is_grad_enabled()  # the scores would be kept for the backward pass
        and batch * heads * q_len * key.shape[-2] * 4 <= MAX_SCORE_BYTES
        and query.device.type == "cpu"
        and query.dtype in (torch.bfloat16, torch.float16)
        and dropout == 0.0
        and kwargs.get("softcap") is None
        and kwargs.get("position_bias") is None
    )


def matmul_attention(
    query_BHQD: torch.Tensor,
    key_BKTD: torch.Tensor,
    value_BKTD: torch.Tensor,
    mask: torch.Tensor | None,
    scaling: float,
    causal: bool,
) -> torch.Tensor:
    """softmax(q k^T * scaling + mask) v with grouped query heads; returns [B, Q, H, D]
    (the layout transformers' attention functions return)."""
    batch, heads, q_len, _ = query_BHQD.shape
    kv_heads, k_len = key_BKTD.shape[1], key_BKTD.shape[2]
    if mask is None and causal and q_len > 1:
        # sdpa's `is_causal` (upper-left aligned): transformers leaves the mask out only
        # when keys and queries line up, or when the keys past the queries are unused.
        mask = torch.ones(q_len, k_len, dtype=torch.bool, device=query_BHQD.device).tril()
    if mask is None:
        return grouped_attention(query_BHQD, key_BKTD, value_BKTD, scaling)
    mask_B1RT = stacked_mask(mask, batch, heads // kv_heads, q_len, k_len)
    if mask_B1RT.dtype == torch.bool:
        return grouped_attention(query_BHQD, key_BKTD, value_BKTD, scaling, hidden=~mask_B1RT)
    return grouped_attention(query_BHQD, key_BKTD, value_BKTD, scaling, additive=mask_B1RT.float())


def grouped_attention(
    query_BHQD: torch.Tensor,
    key_BKTD: torch.Tensor,
    value_BKTD: torch.Tensor,
    scaling: float,
    hidden: torch.Tensor | None = None,
    additive: torch.Tensor | None = None,
) -> torch.Tensor:
    """`matmul_attention` with its mask already stacked by query head (`stacked_mask`):
    `hidden` [B|1, 1, group * Q, T] True where a key is hidden, or `additive` (fp32) added
    to the scores. A decode step that attends with one mask in every layer stacks it once."""
    batch, heads, q_len, dim = query_BHQD.shape
    kv_heads = key_BKTD.shape[1]
    # Heads h = kv * group + g: a view with each key/value head's queries stacked as rows.
    q_BKRD = query_BHQD.reshape(batch, kv_heads, heads // kv_heads * q_len, dim)
    scores_BKRT = torch.matmul(q_BKRD.float() * scaling, key_BKTD.float().transpose(-1, -2))
    floor = torch.finfo(torch.float32).min
    if hidden is not None:
        # The lowest finite score, not -inf: a query with no key to see (a pad
        # position) gets a finite average instead of NaN, which would reach the
        # gradients through the backward pass even though nothing reads it.
        scores_BKRT = scores_BKRT.masked_fill(hidden, floor)
    if additive is not None:
        # clamped as sdpa's own masks are: -inf (or a sum below the lowest float)
        # would turn a query with no key to see into NaN
        scores_BKRT = (scores_BKRT + additive).clamp(min=floor)
    probs_BKRT = torch.softmax(scores_BKRT, dim=-1).to(value_BKTD.dtype)
    out_BKRD = torch.matmul(probs_BKRT, value_BKTD)
    return out_BKRD.reshape(batch, heads, q_len, dim).transpose(1, 2).contiguous()


def stacked_mask(
    mask: torch.Tensor, batch: int, group: int, q_len: int, k_len: int
) -> torch.Tensor:
    """A mask of shape [B|1, 1, Q, T] (or [Q, T]) repeated over the `group` query heads
    stacked as rows: [B|1, 1, group * Q, T]."""
    if mask.dim() == 2:
        mask = mask.view(1, 1, q_len, k_len)
    if mask.shape[1] != 1:
        raise ValueError("per-head attention masks are not supported by the matmul path")
    if group == 1:
        return mask
    rows = mask.shape[0]
    return mask.unsqueeze(2).expand(rows, 1, group, q_len, k_len).reshape(rows, 1, -1, k_len)


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature; see the module docstring."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if not _use_matmul(query, key, dropout, kwargs):
        if torch.is_grad_enabled():
            attention_mask = no_blind_queries(attention_mask)
        if _grouped_on_cpu(module, query, kwargs):
            return _sdpa_grouped(
                module, query, key, value, attention_mask, dropout, scaling, is_causal
            )
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return matmul_attention(query, key, value, attention_mask, scale, bool(causal)), None


def _grouped_on_cpu(module: torch.nn.Module, query: torch.Tensor, kwargs: dict[str, Any]) -> bool:
    return (
        query.device.type == "cpu"
        and query.dtype == torch.float32
        and getattr(module, "num_key_value_groups", 1) > 1
        and kwargs.get("softcap") is None
        and kwargs.get("position_bias") is None
    )


def _sdpa_grouped(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float,
    scaling: float | None,
    is_causal: bool | None,
) -> tuple[torch.Tensor, None]:
    """torch's sdpa with grouped query heads (`enable_gqa`), as transformers' sdpa path
    computes otherwise after repeating every key and value head per query head: on a CPU
    in fp32 the same numbers bit for bit, without the repeated copies, which the backward
    pass kept, in 0.4-0.8x the time (`tests/engines/test_attention.py`). In bf16 the
    kernel rounds the grouped heads' gradients in another order, and sampler and learner
    drifted further apart, so bf16 keeps transformers' path. transformers takes this path
    only without a mask, because CUDA's kernels then fall back to the plain one; the
    learner's rows are always masked."""
    q_len, kv_len = query.shape[2], key.shape[2]
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(q_len > 1 and attention_mask is None and causal)
    if causal and kv_len > q_len:  # sdpa's causal mask is upper-left aligned
        key, value = key[:, :, :q_len], value[:, :, :q_len]
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
        is_causal=causal, enable_gqa=True,
    )  # fmt: skip
    return out.transpose(1, 2).contiguous(), None


def no_blind_queries(mask: torch.Tensor | None) -> torch.Tensor | None:
    """A boolean mask (True = attend) in which a query that sees no key (a left pad of a
    training batch) sees every key instead. Nothing reads such a query's output, but a
    fully masked row gives NaN gradients in sdpa's CUDA backward: on an H200 every
    left-padded learner batch of rows of different lengths had NaN gradients in 380 of
    its trained tensors (`benchmarks/pack_ab.py`), so its step would be skipped."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return mask | ~mask.any(dim=-1, keepdim=True)


def register() -> None:
    """Make `spiral` a name transformers knows (attention and its mask: sdpa's)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)


def use_spiral_attention(model: Any) -> None:
    """Switch a transformers model that attends with `sdpa` to `spiral` (others, e.g. an
    explicit `eager` or flash attention, are left as they are)."""
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return
    register()
    model.set_attn_implementation(NAME)
