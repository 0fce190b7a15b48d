"""A language-model policy's exact move distribution at a state, and its exact Kuhn and
TicTacToe exploitability: batched `score` calls over the legal answers, no sampling noise.

`temperature` is the sampling temperature whose distribution is wanted: the policy "as
sampled" at T is log_softmax(logits / T); T = 1 is the model's own distribution.

Constrained answers use the trie normalisation (what the constrained sampler draws);
free formats use the sequence normalisation (the distribution given that the model
answers with a legal move directly).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spiral.agents.llm_policy import LLMPolicy
from spiral.games.base import State
from spiral.prompts.render import build_prompt, constraint_for, encode, prefix_free
from spiral.types import Seat

TICTACTOE_GAME_ID = "TicTacToe-v0"
SLICE = 32  # positions per score call: a progress line after each
Progress = Callable[[int, int], None]  # (positions done, positions in all)

if TYPE_CHECKING:
    from spiral.analysis.move_distribution import Normalisation, ScoreFn


def _answer_ids(prompt: str, answer: str, tokenizer: Any) -> tuple[int, ...]:
    head = encode(prompt, tokenizer)
    joint = encode(prompt + answer, tokenizer)
    if joint[: len(head)] == head and len(joint) > len(head):
        return tuple(joint[len(head) :])
    return tuple(tokenizer.encode(answer, add_special_tokens=False))


def answer_request(
    policy: LLMPolicy, state: State, seat: Seat
) -> tuple[list[int], list[tuple[str, list[int]]], Normalisation]:
    """What to score for `seat`'s move at `state`: the prompt, each legal move's answer
    tokens, and the normalisation that matches how the policy samples."""
    spec = policy.spec_for(state)
    tokenizer = policy.sampler.tokenizer
    legal = state.legal_actions()
    prompt = build_prompt(state, seat, spec, tokenizer)
    prompt_ids = encode(prompt, tokenizer)
    constraint = constraint_for(state, spec, tokenizer)
    if constraint is not None:
        choices = [list(c) for c in constraint.choices]
        if len(choices) != len(legal):
            raise ValueError(
                f"{state.game_id}: the answer constraint offers {len(choices)} answers for "
                f"{len(legal)} legal moves; its choices must follow legal_actions()"
            )
        pairs = list(zip(legal, choices, strict=True))
        return prompt_ids + list(constraint.marker), pairs, "trie"
    wrap = "\\boxed{{{}}}" if spec.answer_format == "boxed" else "{}"
    raw = [_answer_ids(prompt, wrap.format(m), tokenizer) for m in legal]
    answers = prefix_free(raw, tokenizer.eos_token_id, legal)
    return prompt_ids, [(m, list(ids)) for m, ids in zip(legal, answers, strict=True)], "sequence"


def model_move_distributions(
    policy: LLMPolicy,
    positions: Sequence[tuple[State, Seat]],
    temperature: float = 1.0,
    progress: Progress | None = None,
) -> list[dict[str, float]]:
    """Exact P(move) of `policy` at each (state, seat to move), sampled at `temperature`:
    every legal answer of the positions batched into score calls, the positions sorted by
    prompt so neighbours share their prefix (the sampler runs each prompt once): one call,
    or `SLICE` positions a call with `progress(done, total)` after each."""
    from spiral.analysis.move_distribution import move_distribution

    requests = [answer_request(policy, state, seat) for state, seat in positions]
    order = sorted(range(len(requests)), key=lambda i: requests[i][0])
    out: list[dict[str, float]] = [{} for _ in requests]
    size = SLICE if progress is not None else max(len(order), 1)  # one call unless watched
    for begin in range(0, len(order), size):
        part = order[begin : begin + size]
        prompts = [requests[i][0] for i in part for _ in requests[i][1]]
        answers = [ids for i in part for _, ids in requests[i][1]]
        scored = policy.sampler.score(prompts, answers, temperature=temperature)
        start = 0
        for i in part:
            prompt_ids, pairs, normalisation = requests[i]
            rows = scored[start : start + len(pairs)]
            start += len(pairs)
            out[i] = move_distribution(_scored(rows), prompt_ids, pairs, normalisation)
        if progress is not None:
            progress(begin + len(part), len(order))
    return out


def _scored(rows: list[list[float]]) -> ScoreFn:
    """A score function that answers with rows already computed (batched above)."""

    def score(prompts: list[list[int]], continuations: list[list[int]]) -> list[list[float]]:
        return rows

    return score


def model_move_distribution(
    policy: LLMPolicy, state: State, seat: Seat, temperature: float = 1.0
) -> dict[str, float]:
    """Exact P(move) of `policy` at `state`, sampled at `temperature`, from one score
    call over the legal answers."""
    return model_move_distributions(policy, [(state, seat)], temperature)[0]


def model_kuhn_exploitability(
    policy: LLMPolicy, temperature: float = 1.0, progress: Progress | None = None
) -> dict[str, Any]:
    """Exact exploitability of the model's Kuhn policy sampled at `temperature`, plus
    its 12-state table."""
    from spiral.analysis.exploitability import kuhn_exploitability, kuhn_info_states

    states = kuhn_info_states()
    found = model_move_distributions(
        policy, [(build(), seat) for _, seat, build in states], temperature, progress
    )
    table = {key: dist for (key, _, _), dist in zip(states, found, strict=True)}
    report: dict[str, Any] = dict(kuhn_exploitability(lambda info, seat: table[info]))
    report["distributions"] = table
    return report


def model_leduc_exploitability(
    policy: LLMPolicy, temperature: float = 1.0, progress: Progress | None = None
) -> dict[str, Any]:
    """Exact exploitability of the model's Leduc policy sampled at `temperature`: its move
    distribution at each of the 288 situations its prompts tell apart (OpenSpiel's 936
    information states; one batched score call, prompts sharing their prefix), handed to
    OpenSpiel (`analysis/leduc.py`)."""
    from spiral.analysis.leduc import leduc_exploitability

    def dists(positions: Sequence[tuple[Any, Seat]]) -> list[dict[str, float]]:
        return model_move_distributions(policy, positions, temperature, progress)

    return leduc_exploitability(dists)


def model_tictactoe_exploitability(
    policy: LLMPolicy, temperature: float = 1.0, progress: Progress | None = None
) -> dict[str, Any]:
    """Exact exploitability of the model's TicTacToe policy sampled at `temperature`: its
    move distribution at every position (4,520 with the default latest-board prompts, one
    batched score call), then a best-response search (`perfect_info`)."""
    from spiral.analysis.perfect_info import exploitability
    from spiral.games import make

    def dists(positions: Sequence[tuple[State, Seat]]) -> list[dict[str, float]]:
        return model_move_distributions(policy, positions, temperature, progress)

    return exploitability(make(TICTACTOE_GAME_ID), tictactoe_key(policy), dists)


def tictactoe_key(policy: LLMPolicy) -> Callable[[State], tuple[Any, ...]]:
    """A TicTacToe position as `policy` meets it: the board and the prompt of the seat to
    move, which together fix everything that follows (`perfect_info`'s key)."""
    tokenizer = policy.sampler.tokenizer

    def key(state: State) -> tuple[Any, ...]:
        if state.is_terminal():
            return (state.board, None)  # type: ignore[attr-defined]
        seat = state.current_player()
        return (state.board, build_prompt(state, seat, policy.spec_for(state), tokenizer))  # type: ignore[attr-defined]

    return key


@dataclass(frozen=True)
class ExactGame:
    """A game in which a model's exploitability can be measured exactly."""

    # (policy, temperature, progress or None) -> report
    measure: Callable[[LLMPolicy, float, Progress | None], dict[str, Any]]
    uniform: float  # the uniform random policy's exploitability, for scale
    needs_openspiel: bool  # the measure runs on OpenSpiel's game tree


# By game id. Uniform random: Kuhn 11/24 (hand-worked); TicTacToe 0.95983 (OpenSpiel's
# exploitability of the uniform policy, which `perfect_info` reproduces; tested); Leduc
# 2.37361 (OpenSpiel's, which `analysis/leduc.py` reproduces; tested).
EXACT_EXPLOITABILITY: dict[str, ExactGame] = {
    "KuhnPokerSingle-v0": ExactGame(model_kuhn_exploitability, 11 / 24, needs_openspiel=True),
    "LeducPoker-v0": ExactGame(model_leduc_exploitability, 2.373611111111111, needs_openspiel=True),
    TICTACTOE_GAME_ID: ExactGame(
        model_tictactoe_exploitability, 0.9598296957671957, needs_openspiel=False
    ),
}
