"""Nouns shared by every layer: moves, parse results, completions, turns, episodes, datums.

All are frozen dataclasses of plain Python values (ints, floats, strings, tuples) so they
can be logged, pickled across processes and compared in tests. Token ids are kept exactly
as the sampler produced them: training rows are built from these ids, never from text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Seat = int  # 0 or 1
Move = str  # a canonical action string such as "[4]", "[bet]", "[Bid: 3, 5]"

ParseFailureKind = Literal["no_answer", "ambiguous", "not_legal", "truncated"]
StopReason = Literal["eos", "stop", "length"]
Outcome = Literal["win", "draw", "truncated", "invalid"]
# Weight precisions a model can load in; "auto": bf16 on CUDA, fp32 on CPU.
DTypeName = Literal["auto", "float32", "bfloat16", "float16"]


@dataclass(frozen=True)
class ParseFailure:
    """Why a model's text did not yield a legal move."""

    kind: ParseFailureKind
    detail: str = ""


@dataclass(frozen=True)
class ParseResult:
    """A canonical legal move, or a typed failure. Exactly one of the two is set."""

    move: Move | None
    failure: ParseFailure | None = None
    answer: str | None = None  # the raw answer span that was extracted, if any

    @property
    def ok(self) -> bool:
        return self.move is not None


@dataclass(frozen=True)
class AnswerConstraint:
    """Restrict a span of the completion to one of `choices` (token id sequences).

    Sampling: free text up to `think_budget` tokens (0 = none), then the tokens of
    `marker` (forced, e.g. the ids of "\\nAnswer: "), then one of `choices` token by token
    via a trie. The learner applies the same restriction when it recomputes log-probs,
    so both sides agree. `choices` must be prefix-free.
    """

    choices: tuple[tuple[int, ...], ...]
    marker: tuple[int, ...] = ()
    think_budget: int = 0

    def next_tokens(self, answer: tuple[int, ...]) -> dict[int, int]:
        """Legal next tokens after the answer prefix `answer`, each with the number of
        choices that continue through it (a single key: the token is forced)."""
        n = len(answer)
        counts: dict[int, int] = {}
        for choice in self.choices:
            if len(choice) > n and choice[:n] == answer:
                counts[choice[n]] = counts.get(choice[n], 0) + 1
        return counts


@dataclass(frozen=True)
class Completion:
    """What a sampler returns for one prompt."""

    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    stop_reason: StopReason
    text: str
    # Index into `tokens` where the constrained answer span starts (None if unconstrained)
    # and the constraint that was applied there.
    answer_start: int | None = None
    constraint: AnswerConstraint | None = None


@dataclass(frozen=True)
class Turn:
    """One decision by one seat: the exact ids seen and sampled, and what they meant."""

    game_id: str
    seat: Seat
    agent: str
    observation: str
    prompt_ids: tuple[int, ...] = ()
    completion: Completion | None = None
    parse: ParseResult | None = None
    policy_version: int = 0

    @property
    def move(self) -> Move | None:
        return self.parse.move if self.parse is not None else None

    @property
    def trainable(self) -> bool:
        """Turns sampled by a model carry ids and log-probs; scripted turns do not."""
        return self.completion is not None and len(self.completion.tokens) > 0


@dataclass(frozen=True)
class Episode:
    """One finished game."""

    game_id: str
    seed: int
    turns: tuple[Turn, ...]
    returns: tuple[float, float]
    outcome: Outcome
    winner: Seat | None = None
    offender: Seat | None = None  # seat that made an invalid move, if any
    agents: tuple[str, str] = ("policy", "policy")
    moves: tuple[Move, ...] = ()
    info: dict[str, str] = field(default_factory=dict)

    def seat_turns(self, seat: Seat) -> tuple[Turn, ...]:
        return tuple(t for t in self.turns if t.seat == seat)


@dataclass(frozen=True)
class Datum:
    """One training row in the shifted (Tinker) layout.

    `input_ids` = prompt + completion without its last token; `target_ids` = the same
    shifted left by one. `sampler_logprobs`, `advantages` and `mask` align with
    `target_ids`; prompt positions have mask 0. `constraint_start` (in target
    coordinates) and `constraint` let the learner recompute constrained log-probs.
    `weight` is how many sampled rows this row stands for (identical rows merged into
    one, see `spiral.algo.merge`): the learner weighs its loss, its regulariser and its
    diagnostics by it and counts it `weight` times when normalising.
    `policy_version` is the version of the weights that sampled the row (the async loop
    measures staleness with it; -1: unknown).
    """

    input_ids: tuple[int, ...]
    target_ids: tuple[int, ...]
    sampler_logprobs: tuple[float, ...]
    advantages: tuple[float, ...]
    mask: tuple[float, ...]
    constraint_start: int | None = None
    constraint: AnswerConstraint | None = None
    game_id: str = ""
    seat: Seat = 0
    weight: float = 1.0
    policy_version: int = -1

    def __post_init__(self) -> None:
        if not self.weight > 0:
            raise ValueError(f"Datum.weight must be > 0 (rows it stands for), got {self.weight}")
        n = len(self.input_ids)
        lengths = (
            len(self.target_ids),
            len(self.sampler_logprobs),
            len(self.advantages),
            len(self.mask),
        )
        if any(length != n for length in lengths):
            raise ValueError(f"Datum arrays must have equal length, got {n} and {lengths}")
