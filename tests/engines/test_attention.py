"""The `spiral` attention function: torch's sdpa numbers, computed as plain matmuls on
CPUs in bf16; sdpa itself everywhere else.

The reference is torch's own sdpa in fp64 on the same (bf16-valued) inputs, so each path
is checked against the exact answer, not against the other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from spiral.engines.loading import ModelConfig
from spiral.engines.torch.attention import (
    NAME,
    attention_forward,
    matmul_attention,
    no_blind_queries,
)
from spiral.engines.torch.loading import cache_kwarg, load_model_and_tokenizer


def _exact(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None):
    group = q.shape[1] // k.shape[1]
    k64 = k.double().repeat_interleave(group, dim=1)
    v64 = v.double().repeat_interleave(group, dim=1)
    causal = mask is None and q.shape[2] > 1
    out = F.scaled_dot_product_attention(q.double(), k64, v64, attn_mask=mask, is_causal=causal)
    return out.transpose(1, 2)


def _inputs(batch: int, heads: int, kv: int, q_len: int, k_len: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, q_len, 16, generator=g).to(torch.bfloat16)
    k = torch.randn(batch, kv, k_len, 16, generator=g).to(torch.bfloat16)
    v = torch.randn(batch, kv, k_len, 16, generator=g).to(torch.bfloat16)
    return q, k, v


def _padding_mask(batch: int, q_len: int, k_len: int) -> torch.Tensor:
    """Left padding (row b has b padded keys) and causal over the last q_len keys."""
    keys = torch.arange(k_len)
    queries = torch.arange(k_len - q_len, k_len)
    causal = keys[None, :] <= queries[:, None]
    pads = torch.stack([keys >= b for b in range(batch)])
    return (causal[None, :, :] & pads[:, None, :]).unsqueeze(1)  # [B, 1, Q, K]


@pytest.mark.parametrize(("heads", "kv"), [(6, 2), (4, 4), (3, 1)])
@pytest.mark.parametrize(("q_len", "k_len"), [(1, 9), (5, 12), (7, 7)])
def test_matmul_attention_matches_exact_attention(heads: int, kv: int, q_len: int, k_len: int):
    q, k, v = _inputs(3, heads, kv, q_len, k_len)
    mask = _padding_mask(3, q_len, k_len)
    out = matmul_attention(q, k, v, mask, 16**-0.5, causal=True)
    assert out.shape == (3, q_len, heads, 16) and out.dtype == torch.bfloat16
    assert torch.isfinite(out).all()  # a pad query that sees no key is finite, not NaN
    seen = mask[:, 0].any(-1)  # [B, Q]: queries with at least one key to attend to
    assert torch.allclose(out.double()[seen], _exact(q, k, v, mask)[seen], atol=2e-2)
    # an additive float mask means the same as the boolean one
    additive = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    same = matmul_attention(q, k, v, additive, 16**-0.5, causal=True)
    assert torch.equal(out, same)


def test_no_mask_means_causal_for_many_queries_and_everything_for_one() -> None:
    q, k, v = _inputs(2, 4, 2, 6, 6)
    out = matmul_attention(q, k, v, None, 16**-0.5, causal=True)
    assert torch.allclose(out.double(), _exact(q, k, v, None), atol=2e-2)
    one_q, k9, v9 = _inputs(2, 4, 2, 1, 9, seed=1)
    out = matmul_attention(one_q, k9, v9, None, 16**-0.5, causal=True)
    assert torch.allclose(out.double(), _exact(one_q, k9, v9, None), atol=2e-2)
    # causal: the first of several queries sees key 0 only, so it returns value 0
    assert torch.allclose(
        matmul_attention(q, k, v, None, 16**-0.5, True)[:, 0].float(),
        v[:, :, 0].repeat_interleave(2, dim=1).float(),
        atol=1e-2,
    )


class _Module(torch.nn.Module):
    is_causal = True
    num_key_value_groups = 2


def test_matmuls_only_for_bf16_without_autograd() -> None:
    """fp32, or anything under autograd (the learner: the matmuls would keep every score
    matrix for the backward pass), is sdpa itself, bit for bit."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    mask = _padding_mask(2, 3, 5)
    bq, bk, bv = _inputs(2, 4, 2, 3, 5)
    for q, k, v, grad in ((bq.float(), bk.float(), bv.float(), False), (bq, bk, bv, True)):
        with torch.set_grad_enabled(grad):
            ours, _ = attention_forward(_Module(), q, k, v, mask, scaling=0.25)
            theirs, _ = sdpa_attention_forward(_Module(), q, k, v, mask, scaling=0.25)
        assert torch.equal(ours, theirs)
    with torch.no_grad():
        matmul, _ = attention_forward(_Module(), bq, bk, bv, mask, scaling=0.25)
    assert torch.equal(matmul, matmul_attention(bq, bk, bv, mask, 0.25, causal=True))


def test_large_score_matrices_go_to_sdpa(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above MAX_SCORE_BYTES of fp32 scores per layer (a long prefill) it is sdpa itself."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from spiral.engines.torch import attention

    mask = _padding_mask(2, 3, 5)
    q, k, v = _inputs(2, 4, 2, 3, 5)
    scores = 2 * 4 * 3 * 5 * 4  # bytes of fp32 scores: batch * heads * queries * keys * 4
    with torch.no_grad():
        theirs, _ = sdpa_attention_forward(_Module(), q, k, v, mask, scaling=0.25)
        mine = matmul_attention(q, k, v, mask, 0.25, causal=True)
        monkeypatch.setattr(attention, "MAX_SCORE_BYTES", scores)
        assert torch.equal(attention_forward(_Module(), q, k, v, mask, scaling=0.25)[0], mine)
        monkeypatch.setattr(attention, "MAX_SCORE_BYTES", scores - 1)
        assert torch.equal(attention_forward(_Module(), q, k, v, mask, scaling=0.25)[0], theirs)


def test_large_logits_are_as_accurate_as_sdpa() -> None:
    """Attention logits with a spread of ~9 (real models have such heads): the scores are
    computed in fp32, so the error stays at sdpa's level, not at bf16's spacing near 30."""
    q, k, v = _inputs(2, 4, 2, 1, 64, seed=3)
    q = (q.float() * 3).to(torch.bfloat16)
    k = (k.float() * 3).to(torch.bfloat16)
    exact = _exact(q, k, v, None)
    ours = matmul_attention(q, k, v, None, 16**-0.5, causal=True).double()
    sdpa = F.scaled_dot_product_attention(q, k, v, enable_gqa=True).transpose(1, 2).double()
    assert (ours - exact).abs().max() <= 2 * (sdpa - exact).abs().max() + 4e-3


@pytest.mark.usefixtures("half_precision")
def test_models_switch_from_sdpa_and_agree_in_bf16(tiny_llama: Path) -> None:
    """A loaded model attends with `spiral`; its bf16 logits on a left-padded batch, and
    through a KV-cached decode step, match the same weights under sdpa."""
    model, tok = load_model_and_tokenizer(ModelConfig(str(tiny_llama), lora_rank=0))
    assert model.config._attn_implementation == NAME
    bf16, _ = load_model_and_tokenizer(
        ModelConfig(str(tiny_llama), lora_rank=0, dtype="bfloat16"), trained=False
    )
    ids = [tok("your move [4] and then")["input_ids"], tok("hello")["input_ids"]]
    width = max(len(s) for s in ids)
    input_ids = torch.tensor([[tok.pad_token_id] * (width - len(s)) + s for s in ids])
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in ids])
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    bf16.eval()
    with torch.inference_mode():
        ours = bf16(input_ids=input_ids, attention_mask=mask, position_ids=positions).logits
        step = bf16(
            input_ids=input_ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions[:, :-1],
            use_cache=True,
        )  # fmt: skip
        last = bf16(
            input_ids=input_ids[:, -1:], attention_mask=mask, position_ids=positions[:, -1:],
            **cache_kwarg(bf16, step.past_key_values),
        ).logits  # fmt: skip
        bf16.set_attn_implementation("sdpa")
        theirs = bf16(input_ids=input_ids, attention_mask=mask, position_ids=positions).logits
    real = mask.bool()
    assert (ours - theirs)[real].abs().max() < 0.05
    assert (last[:, -1] - theirs[:, -1]).abs().max() < 0.05


def test_a_query_that_sees_no_key_sees_every_key_instead() -> None:
    mask = torch.tensor([[False, False], [True, False]])
    assert torch.equal(no_blind_queries(mask), torch.tensor([[True, True], [True, False]]))
    assert no_blind_queries(None) is None
    additive = torch.zeros(2, 2)
    assert no_blind_queries(additive) is additive  # only boolean masks are changed


def test_under_autograd_blind_queries_change_nothing_that_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A left-padded training batch (queries = keys, row b starts with b pads): sdpa gets
    the pads' rows unmasked, and the outputs and gradients of every query that sees a
    key are those of the mask as it came."""
    from transformers.integrations import sdpa_attention

    seen: list[torch.Tensor] = []
    real = sdpa_attention.sdpa_attention_forward
    kernel = F.scaled_dot_product_attention

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["attn_mask"])
        return kernel(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    mask = _padding_mask(3, 6, 6)
    sees = mask.any(-1).squeeze(1)  # [B, Q]: False for each row's leading pads
    assert not sees.all()
    outs, grads = [], []
    for fixed in (False, True):
        q, k, v = (t.float().requires_grad_() for t in _inputs(3, 4, 2, 6, 6))
        if fixed:
            out, _ = attention_forward(_Module(), q, k, v, mask, scaling=0.25)
        else:
            out, _ = real(_Module(), q, k, v, mask, scaling=0.25)
        out[sees].sum().backward()
        outs.append(out[sees].detach())
        grads.append([t.grad for t in (q, k, v)])
    assert not seen[-1].any(-1).eq(False).any()  # sdpa saw no blind query
    torch.testing.assert_close(outs[1], outs[0])
    for mine, theirs in zip(grads[1], grads[0], strict=True):
        assert torch.isfinite(mine).all()
        torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("heads", "kv", "q_len", "k_len"), [(6, 2, 5, 12), (9, 3, 2, 9), (4, 2, 7, 7)]
)
def test_grouped_heads_on_a_cpu_are_transformers_sdpa_bit_for_bit(
    dtype: torch.dtype, heads: int, kv: int, q_len: int, k_len: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under autograd with a padding mask (the learner's case): in fp32 sdpa over grouped
    heads gives transformers' repeated-heads numbers, outputs and gradients, bit for bit;
    bf16 is left on transformers' path (so equal too)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    grouped: list[bool] = []
    kernel = F.scaled_dot_product_attention

    def spy(*args: Any, **kwargs: Any) -> Any:
        grouped.append(bool(kwargs.get("enable_gqa")))
        return kernel(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    module = _Module()
    module.num_key_value_groups = heads // kv  # type: ignore[misc]
    mask = no_blind_queries(_padding_mask(3, q_len, k_len))
    results = []
    for ours in (False, True):
        q, k, v = (t.to(dtype).requires_grad_() for t in _inputs(3, heads, kv, q_len, k_len))
        forward = attention_forward if ours else sdpa_attention_forward
        out, _ = forward(module, q, k, v, mask, scaling=0.25)
        out.float().square().sum().backward()
        results.append([out.detach(), q.grad, k.grad, v.grad])
    assert grouped == [False, dtype == torch.float32]  # transformers' call, then ours
    for mine, theirs in zip(results[1], results[0], strict=True):
        assert torch.equal(mine, theirs)
