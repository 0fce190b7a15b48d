"""`prefill_grouped`, the learner's and the scorer's tree forward: short tails packed after
their stem under a tree-shaped mask, long ones run apart from a copy of the stem's cache;
both give every row's hidden states (and gradients) as the row run whole would."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from spiral.engines.loading import ModelConfig
from spiral.engines.torch import prefill as prefill_module
from spiral.engines.torch.loading import load_model_and_tokenizer
from spiral.engines.torch.prefill import common_prefix_len, prefill_grouped

from .conftest import PROMPT_TEXTS, chat_prompts


def _rows(tok, tail_len: int) -> tuple[list[list[int]], list[int]]:  # type: ignore[no-untyped-def]
    """Three prompts, each answered by 1-3 rows with tails of up to `tail_len` tokens."""
    prompts = chat_prompts(tok, PROMPT_TEXTS[:3])
    seqs, ends = [], []
    for k, prompt in enumerate(prompts):
        for r in range(k + 1):
            tail = [(7 * k + 3 * r + j) % 50 + 5 for j in range(1 + (r + k) % tail_len)]
            seqs.append([*prompt, *tail])
            ends.append(len(prompt))
    return seqs, ends


def _whole(model, seqs: list[list[int]]) -> list[torch.Tensor]:  # type: ignore[no-untyped-def]
    return [
        model(input_ids=torch.tensor([s]), output_hidden_states=True).hidden_states[-1][0]
        for s in seqs
    ]


@pytest.mark.parametrize("packed", [True, False])
def test_every_layout_gives_each_row_its_own_hidden_states_and_gradient(
    packed: bool, tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tok = load_model_and_tokenizer(ModelConfig(str(tiny_llama), lora_rank=4, seed=0))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.3)
    monkeypatch.setattr(prefill_module, "PACKED_TAILS_MAX", 64 if packed else 0)
    seqs, ends = _rows(tok, tail_len=4)
    prefix = min(common_prefix_len(seqs), *ends)
    assert prefix > 0 and len(set(ends)) == 3
    pre = prefill_grouped(
        model, seqs, prefix, ends, tok.pad_token_id, output_hidden_states=True, logits_to_keep=1
    )
    hidden = pre.out.hidden_states[-1]
    spots = [(b, i) for b, s in enumerate(seqs) for i in range(ends[b], len(s))]
    ours = torch.stack([hidden[pre.locate(b, i)] for b, i in spots])
    whole = _whole(model, seqs)
    theirs = torch.stack([whole[b][i] for b, i in spots])
    assert torch.allclose(ours, theirs, atol=1e-5), (ours - theirs).abs().max()
    lora = [p for n, p in model.named_parameters() if "lora_" in n]
    # A random projection of the (normalised) states: their squares would sum to nearly a
    # constant, leaving gradients of rounding noise alone.
    w = torch.randn(ours.shape[-1], generator=torch.Generator().manual_seed(0))
    g_ours = torch.autograd.grad((ours @ w).sum(), lora)
    g_theirs = torch.autograd.grad((theirs @ w).sum(), lora)
    for a, b in zip(g_ours, g_theirs, strict=True):
        assert float((a - b).norm()) <= 1e-4 * float(b.norm()), float((a - b).norm() / b.norm())
    if packed:  # one sequence a group: as many rows as stems
        assert hidden.shape[0] == 3
    else:
        assert hidden.shape[0] == len(seqs)


def test_long_tails_run_apart(tiny_llama: Path) -> None:
    """Tails of more than PACKED_TAILS_MAX tokens a group (free text) keep a row each."""
    model, tok = load_model_and_tokenizer(ModelConfig(str(tiny_llama), lora_rank=0))
    prompt = chat_prompts(tok, PROMPT_TEXTS[:1])[0]
    seqs = [[*prompt, *range(5, 5 + 40)], [*prompt, *range(9, 9 + 40)]]
    ends = [len(prompt)] * 2
    with torch.no_grad():
        pre = prefill_grouped(
            model, seqs, 0, ends, tok.pad_token_id, output_hidden_states=True, logits_to_keep=1
        )
    assert pre.out.hidden_states[-1].shape[0] == 2
