"""The torch sampler's rows, groups and batch plan: who is decoded, prefilled together,
and how a call is cut into chunks (sampler.py's module docstring)."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from spiral.engines.base import SamplingParams
from spiral.engines.torch.constrained import ConstrainedRow
from spiral.engines.torch.snapshots import TRAINED
from spiral.errors import SpiralError
from spiral.types import AnswerConstraint, StopReason


@contextlib.contextmanager
def eval_mode(model: Any) -> Iterator[None]:
    """Run without dropout and without autograd, restoring the previous train flag."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was_training)


def eos_token_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """Tokens that end a completion: the tokenizer's eos plus the generation config's."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen = getattr(model, "generation_config", None)
    extra = getattr(gen, "eos_token_id", None) if gen is not None else None
    if isinstance(extra, int):
        ids.add(extra)
    elif extra is not None:
        ids.update(int(t) for t in extra)
    if not ids:
        raise ValueError("the tokenizer has no eos token; set tokenizer.eos_token")
    return frozenset(ids)


@dataclass
class Row:
    index: int
    rng: random.Random
    constrained: ConstrainedRow | None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stop_reason: StopReason | None = None
    kept: dict[Any, Any] | None = None  # a frozen member's store of answer distributions
    kept_key: tuple[Any, ...] = ()  # (prompt, constraint): the store's key before the tokens
    limit: int | None = None  # new tokens the model's context leaves (None: max_tokens)


@dataclass
class Group:
    """Rows asking the same question of the same adapter: prefilled once."""

    prompt: list[int]
    constraint: AnswerConstraint | None
    rows: list[Row]
    adapter: str = TRAINED


STAT_KEYS = (
    "prompt_tokens", "prefill_tokens", "prefill_s", "decode_tokens", "decode_s", "kept_rows",
)  # fmt: skip


def group_cost(group: Group, params: SamplingParams) -> int:
    """KV-cache positions a group can occupy: its prompt once per branch it may grow
    (a constrained answer without thinking branches at most once per legal move) plus
    every row's new tokens."""
    n = len(group.rows)
    c = group.constraint
    branches = n if c is None or c.think_budget > 0 else min(n, len(c.choices))
    return len(group.prompt) * branches + n * row_budget(params, c)


def row_budget(params: SamplingParams, constraint: AnswerConstraint | None) -> int:
    if constraint is None:
        return params.max_tokens
    longest = max(len(c) for c in constraint.choices)
    return min(constraint.think_budget, params.max_tokens) + len(constraint.marker) + longest


class ContextLengthError(SpiralError, ValueError):
    """A prompt that leaves no room for a reply within the model's context length."""


def model_context(model: Any) -> int | None:
    """The model's context length in tokens (`max_position_embeddings`), when it says."""
    config = getattr(model, "config", None)
    getter = getattr(config, "get_text_config", None)
    config = getter() if callable(getter) else config
    value = getattr(config, "max_position_embeddings", None)
    if isinstance(value, int) and not isinstance(value, bool) and value <= 0:
        raise ContextLengthError(
            f"the model's config.json gives max_position_embeddings={value}, no context at "
            "all; the folder's config is damaged or hand-edited: set the model's real context"
        )
    return value if isinstance(value, int) and value > 0 else None


def row_limit(
    prompt_len: int, constraint: AnswerConstraint | None, params: SamplingParams, context: int
) -> int | None:
    """New tokens a row may take (thinking, for a constrained row) so that prompt and reply
    stay within `context`: None where `max_tokens` already does; refused in one line
    where not even the shortest reply fits (one token, or a constrained row's marker and
    longest choice)."""
    answer = 0 if constraint is None else len(constraint.marker) + max(map(len, constraint.choices))
    room = context - prompt_len
    if room < max(answer, 1):
        raise ContextLengthError(
            f"a prompt of {prompt_len} tokens leaves {max(room, 0)} of the model's context of "
            f"{context} tokens (max_position_embeddings in its config.json), too few for a "
            f"reply of {max(answer, 1)}; use a model with a longer context, or shorten the "
            "prompts (fewer max_turns, a shorter prompt_style)"
        )
    limit = room - answer
    return limit if limit < params.max_tokens else None


def constrained_row(
    c: AnswerConstraint | None,
    params: SamplingParams,
    eos_ids: frozenset[int],
    limit: int | None = None,
) -> ConstrainedRow | None:
    """A row's answer-constraint state: thinking up to the constraint's budget, within
    max_tokens and the `limit` the model's context leaves; None for a free row."""
    if c is None:
        return None
    think = min(c.think_budget, params.max_tokens)
    return ConstrainedRow(c, eos_ids, think if limit is None else min(think, limit))


def new_rows(
    prompts: Sequence[Sequence[int]],
    constraints: Sequence[AnswerConstraint | None],
    params: SamplingParams,
    base_seed: int,
    context: int | None,
    eos_ids: frozenset[int],
) -> list[Row]:
    """One row per prompt: its own random stream from (base_seed, index), its answer
    constraint's state, and the new tokens the model's context leaves it (`row_limit`;
    a constrained row's thinking never runs past it)."""
    rows = []
    for i, (prompt, c) in enumerate(zip(prompts, constraints, strict=True)):
        limit = None if context is None else row_limit(len(prompt), c, params, context)
        constrained = constrained_row(c, params, eos_ids, limit)
        rows.append(Row(i, random.Random(base_seed * 1_000_003 + i), constrained, limit=limit))
    return rows


def chunk_rows(costs: Any, order: Sequence[int], budget: int) -> list[list[int]]:
    """Cut `order` into consecutive chunks whose summed cost fits `budget` (>= 1 row each)."""
    chunks: list[list[int]] = []
    current: list[int] = []
    used = 0
    for i in order:
        if current and used + costs[i] > budget:
            chunks.append(current)
            current, used = [], 0
        current.append(i)
        used += costs[i]
    if current:
        chunks.append(current)
    return chunks


def group_rows(
    prompts: Sequence[Sequence[int]],
    cons: Sequence[AnswerConstraint | None],
    rows: Sequence[Row],
    names: Sequence[str],
    share_identical: bool = True,
) -> list[Group]:
    """Rows with the same prompt, constraint and adapter form one group (one prefill)."""
    requests = zip(prompts, cons, rows, names, strict=True)
    if not share_identical:
        return [Group(list(p), c, [r], a) for p, c, r, a in requests]
    by_key: dict[tuple[tuple[int, ...], AnswerConstraint | None, str], Group] = {}
    for prompt, constraint, row, name in requests:
        key = (tuple(prompt), constraint, name)
        if key not in by_key:
            by_key[key] = Group(list(prompt), constraint, [], name)
        by_key[key].rows.append(row)
    return list(by_key.values())
