"""Log-probs of given continuations, and the model's output head over chosen positions.

`score_rows` is what `TorchSampler.score` runs per chunk (an exploitability table scores
every legal move of many positions); `hidden_to_logits` is the head that the samplers and
the learner share, so both compute the logits the model's own forward would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from spiral.engines.torch.precision import autocast_for
from spiral.engines.torch.prefill import common_prefix_len, prefill_grouped
from spiral.engines.torch.sampler_rows import chunk_rows


def score_rows(
    model: Any,
    seqs: list[list[int]],
    prompt_lens: list[int],
    temperature: float,
    pad_id: int,
    share_prefix: bool = True,
) -> list[list[float]]:
    """Each row's log-probs after its first `prompt_lens[b]` tokens at `temperature`
    (<= 0: 1), one batched forward as a tree (`prefill_grouped`): the rows' common
    prefix once where `share_prefix`, each distinct prompt once, then every row's
    continuation. The prompt's last token runs with the row's tail: its output predicts
    the first scored token."""
    if share_prefix:
        stem_ends = [n - 1 for n in prompt_lens]
        prefix = min(common_prefix_len(seqs), *stem_ends) if len(seqs) > 1 else 0
    else:
        stem_ends, prefix = [0] * len(seqs), 0
    pre = prefill_grouped(
        model, seqs, prefix, stem_ends, pad_id,
        output_hidden_states=True, logits_to_keep=1,
    )  # fmt: skip
    hidden_BSH = pre.out.hidden_states[-1]
    rows, cols, targets = [], [], []
    for b, (seq, n) in enumerate(zip(seqs, prompt_lens, strict=True)):
        for j, token in enumerate(seq[n:]):
            row, col = pre.locate(b, n - 1 + j)  # prompt[-1]'s output predicts seq[n]
            rows.append(row)
            cols.append(col)
            targets.append(int(token))
    logits_NV = hidden_to_logits(model, hidden_BSH[rows, cols])
    if temperature > 0:
        logits_NV = logits_NV / temperature
    target_N1 = torch.tensor(targets, device=logits_NV.device).unsqueeze(1)
    values = torch.log_softmax(logits_NV, dim=-1).gather(1, target_N1).squeeze(1).tolist()
    out = []
    for seq, n in zip(seqs, prompt_lens, strict=True):
        k = len(seq) - n
        out.append(values[:k])
        values = values[k:]
    return out


def score_continuations(
    model: Any,
    prompts: Sequence[Sequence[int]],
    continuations: Sequence[Sequence[int]],
    temperature: float,
    pad_id: int,
    prefix_reuse: bool,
    max_batch_tokens: int,
) -> list[list[float]]:
    """`TorchSampler.score`'s work: the rows sorted by their tokens (shared prefixes side
    by side), cut into chunks of at most `max_batch_tokens`, each scored by `score_rows`;
    an empty continuation scores []."""
    result: list[list[float]] = [[] for _ in prompts]
    todo = [i for i, c in enumerate(continuations) if len(c) > 0]
    seqs = {i: list(prompts[i]) + list(continuations[i]) for i in todo}
    order = sorted(todo, key=lambda i: seqs[i])
    costs = {i: len(seqs[i]) for i in todo}
    for chunk in chunk_rows(costs, order, max_batch_tokens):
        values = score_rows(
            model,
            [seqs[i] for i in chunk],
            [len(prompts[i]) for i in chunk],
            temperature,
            pad_id,
            prefix_reuse,
        )
        for i, row in zip(chunk, values, strict=True):
            result[i] = row
    return result


def hidden_to_logits(model: Any, hidden_NH: torch.Tensor) -> torch.Tensor:
    """Final hidden states -> fp32 logits, as the model's own head computes them."""
    with autocast_for(model):  # full fine-tuning's fp32 head over bf16 hidden states
        logits_NV = model.get_output_embeddings()(hidden_NH).float()
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:  # Gemma-2 style soft-capping lives in the CausalLM forward, after the head
        logits_NV = torch.tanh(logits_NV / cap) * cap
    return logits_NV
