"""A language-model policy's exact move distribution at a state, and its exact Kuhn
exploitability: one `score` call over the legal answers, no sampling noise.

`temperature` is the sampling temperature whose distribution is wanted: the policy "as
sampled" at T is log_softmax(logits / T); T = 1 is the model's own distribution.

Constrained answers use the trie normalisation (what the constrained sampler draws);
free formats use the sequence normalisation (the distribution given that the model
answers with a legal move directly).
"""

from __future__ import annotations

from typing import Any

from spiral.agents.llm_policy import LLMPolicy
from spiral.games.base import State
from spiral.prompts.render import build_prompt, constraint_for, encode, prefix_free
from spiral.types import Seat


def _answer_ids(prompt: str, answer: str, tokenizer: Any) -> tuple[int, ...]:
    head = encode(prompt, tokenizer)
    joint = encode(prompt + answer, tokenizer)
    if joint[: len(head)] == head and len(joint) > len(head):
        return tuple(joint[len(head) :])
    return tuple(tokenizer.encode(answer, add_special_tokens=False))


def model_move_distribution(
    policy: LLMPolicy, state: State, seat: Seat, temperature: float = 1.0
) -> dict[str, float]:
    """Exact P(move) of `policy` at `state`, sampled at `temperature`, from one score
    call over the legal answers."""
    from spiral.evaluation.move_distribution import move_distribution

    def score(prompts: list[list[int]], conts: list[list[int]]) -> list[list[float]]:
        return policy.sampler.score(prompts, conts, temperature=temperature)

    spec = policy.spec_for(state)
    tokenizer = policy.sampler.tokenizer
    legal = state.legal_actions()
    prompt = build_prompt(state, seat, spec, tokenizer)
    prompt_ids = encode(prompt, tokenizer)
    constraint = constraint_for(state, spec, tokenizer)
    if constraint is not None:
        choices = [list(c) for c in constraint.choices]
        return move_distribution(
            score,
            prompt_ids + list(constraint.marker),
            list(zip(legal, choices, strict=True)),
            "trie",
        )
    wrap = "\\boxed{{{}}}" if spec.answer_format == "boxed" else "{}"
    raw = [_answer_ids(prompt, wrap.format(m), tokenizer) for m in legal]
    answers = prefix_free(raw, tokenizer.eos_token_id, legal)
    pairs = [(m, list(ids)) for m, ids in zip(legal, answers, strict=True)]
    return move_distribution(score, prompt_ids, pairs, "sequence")


def model_kuhn_exploitability(policy: LLMPolicy, temperature: float = 1.0) -> dict[str, Any]:
    """Exact exploitability of the model's Kuhn policy sampled at `temperature`, plus
    its 12-state table."""
    from spiral.evaluation.exploitability import kuhn_exploitability, kuhn_info_states

    table = {
        key: model_move_distribution(policy, build(), seat, temperature)
        for key, seat, build in kuhn_info_states()
    }
    report: dict[str, Any] = dict(kuhn_exploitability(lambda info, seat: table[info]))
    report["distributions"] = table
    return report
