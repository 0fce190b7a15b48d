"""Shared fixtures for engine tests: tiny real models built once per session."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from spiral.types import AnswerConstraint, Completion, Datum


def chat_prompts(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """Chat-template prompts of different lengths (so padding is exercised)."""
    return [
        list(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True
            )["input_ids"]
        )
        for t in texts
    ]


PROMPT_TEXTS = [
    "Your move.",
    "Your move. the board is shown below and you are playing tic tac toe against an opponent",
    "hello",
    "Your move. [4] [bet]",
]


def move_constraint(
    tokenizer: Any, think_budget: int, marker: str = "\nAnswer: "
) -> AnswerConstraint:
    choices = tuple(tuple(tokenizer(f"[{k}]")["input_ids"]) for k in range(9))
    mark = tuple(tokenizer(marker)["input_ids"]) if marker else ()
    return AnswerConstraint(choices=choices, marker=mark, think_budget=think_budget)


def agreement_constraints(tokenizer: Any) -> list[AnswerConstraint | None]:
    """One constraint per PROMPT_TEXTS prompt: free, no marker, thinking, marker only."""
    return [
        None,
        move_constraint(tokenizer, 0, ""),
        move_constraint(tokenizer, 5),
        move_constraint(tokenizer, 0),
    ]


def sample_agreement_datums(learner: Any, seed: int, temperature: float) -> list[Datum]:
    """The learner's own sampler on PROMPT_TEXTS under `agreement_constraints`, as datums."""
    from spiral.engines.base import SamplingParams

    tok = learner.tokenizer
    prompts = chat_prompts(tok, PROMPT_TEXTS)
    params = SamplingParams(max_tokens=12, temperature=temperature, seed=seed)
    out = learner.sampler().sample(prompts, params, agreement_constraints(tok))
    return [to_datum(p, c) for p, c in zip(prompts, out, strict=True)]


def max_gap(learner: Any, datums: list[Datum]) -> float:
    """Largest |sampler log-prob - learner log-prob| over the datums' trained tokens."""
    gaps = [0.0]
    for d, recomputed in zip(datums, learner.logprobs(datums), strict=True):
        gaps += [
            abs(a - b)
            for a, b, m in zip(d.sampler_logprobs, recomputed, d.mask, strict=True)
            if m > 0
        ]
    return max(gaps)


def to_datum(prompt: list[int], completion: Completion, advantage: float = 1.0) -> Datum:
    """Tinker layout: prompt + completion shifted; only completion positions are masked in."""
    seq = list(prompt) + list(completion.tokens)
    n_prompt, n_done = len(prompt) - 1, len(completion.tokens)
    start = None if completion.answer_start is None else n_prompt + completion.answer_start
    return Datum(
        input_ids=tuple(seq[:-1]),
        target_ids=tuple(seq[1:]),
        sampler_logprobs=(0.0,) * n_prompt + tuple(completion.logprobs),
        advantages=(0.0,) * n_prompt + (advantage,) * n_done,
        mask=(0.0,) * n_prompt + (1.0,) * n_done,
        constraint_start=start,
        constraint=completion.constraint,
    )


def is_loss(
    new_T: torch.Tensor, old_T: torch.Tensor, adv_T: torch.Tensor, mask_T: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """Importance-sampling loss summed over tokens (the Tinker default's shape)."""
    ratio_T = torch.exp(new_T - old_T)
    n = float(mask_T.sum().clamp(min=1.0))
    return -(adv_T * ratio_T * mask_T).sum(), {
        "ratio": float((ratio_T * mask_T).sum().detach()) / n
    }


LossFnT = Callable[..., tuple[torch.Tensor, dict[str, float]]]
