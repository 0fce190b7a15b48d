"""Constrained answers: a token trie over legal choices and the per-row decode plan.

An `AnswerConstraint` says: free text for up to `think_budget` tokens, then the `marker`
tokens (forced), then exactly one of `choices` (prefix-free token-id sequences), token by
token. The sampler drives one `ConstrainedRow` per constrained prompt; the learner calls
`answer_masks` to rebuild, for a finished row, the same allowed-token sets, so sampler and
learner compute the same (masked, tempered) log-probs.

Choices:
- A forced token (marker, or a trie node with a single child in the *marker* phase) has
  log-prob 0.0 on both sides and carries no gradient. Inside the answer, a position with
  a single legal token is still "sampled" from the masked distribution, whose log-prob is
  exactly 0 too; the two cases agree numerically.
- An eos sampled while thinking ends the thinking early; the eos token is kept in the
  completion (it was a real sampled decision, and the learner trains on it), then the
  marker is forced. Stop strings do not apply to constrained rows.
- `constraint_start` in a Datum is the target index of the FIRST ANSWER TOKEN (that is
  `len(prompt) - 1 + completion.answer_start`); the `len(marker)` targets before it are
  the forced marker. The learner checks those targets really are the marker and fails
  loudly if not, which catches off-by-one layouts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from spiral.types import AnswerConstraint

Phase = Literal["think", "marker", "answer", "done"]


class TokenTrie:
    """A prefix tree over token-id sequences; `choices` must be non-empty and prefix-free."""

    def __init__(self, choices: Sequence[Sequence[int]]) -> None:
        if not choices:
            raise ValueError("AnswerConstraint.choices is empty: give at least one legal choice")
        self._children: dict[tuple[int, ...], set[int]] = {}
        self._complete: set[tuple[int, ...]] = set()
        for choice in choices:
            seq = tuple(int(t) for t in choice)
            if not seq:
                raise ValueError("AnswerConstraint.choices contains an empty sequence")
            for k in range(len(seq)):
                self._children.setdefault(seq[:k], set()).add(seq[k])
            self._complete.add(seq)
        for seq in self._complete:
            if seq in self._children:
                raise ValueError(
                    f"choices are not prefix-free: {list(seq)} is a prefix of another choice; "
                    "add a terminator token (e.g. ']') to every choice"
                )

    def allowed(self, prefix: Sequence[int]) -> tuple[int, ...]:
        """Sorted token ids that may follow `prefix` (empty when `prefix` is complete)."""
        return tuple(sorted(self._children.get(tuple(prefix), ())))

    def is_complete(self, prefix: Sequence[int]) -> bool:
        return tuple(prefix) in self._complete


@dataclass
class ConstrainedRow:
    """Decode state of one constrained completion (mutable, lives inside one sample call)."""

    constraint: AnswerConstraint
    eos_ids: frozenset[int]
    think_limit: int  # min(think_budget, max_tokens)
    trie: TokenTrie = field(init=False)
    phase: Phase = field(init=False)
    think_count: int = 0
    marker_pos: int = 0
    answer: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.trie = TokenTrie(self.constraint.choices)
        self.phase = "think" if self.think_limit > 0 else "marker"
        self._skip_empty_marker()

    def _skip_empty_marker(self) -> None:
        if self.phase == "marker" and self.marker_pos >= len(self.constraint.marker):
            self.phase = "answer"

    def forced_token(self) -> int | None:
        """The token this row must emit next without sampling (marker phase), else None."""
        if self.phase == "marker":
            return self.constraint.marker[self.marker_pos]
        return None

    def allowed(self) -> tuple[int, ...] | None:
        """Legal next tokens in the answer phase; None means unrestricted (thinking)."""
        return self.trie.allowed(self.answer) if self.phase == "answer" else None

    def push(self, token: int) -> None:
        """Record the emitted token and advance the phase."""
        if self.phase == "think":
            self.think_count += 1
            if token in self.eos_ids or self.think_count >= self.think_limit:
                self.phase = "marker"
                self._skip_empty_marker()
        elif self.phase == "marker":
            self.marker_pos += 1
            self._skip_empty_marker()
        elif self.phase == "answer":
            self.answer.append(token)
            if self.trie.is_complete(self.answer):
                self.phase = "done"
        else:
            raise RuntimeError("push() on a finished constrained row")

    @property
    def done(self) -> bool:
        return self.phase == "done"


def answer_masks(
    constraint: AnswerConstraint, target_ids: Sequence[int], constraint_start: int
) -> tuple[list[int], list[tuple[int, tuple[int, ...]]]]:
    """For a finished datum: (forced marker positions, [(answer position, allowed ids)]).

    Positions are target indices. Raises ValueError when the targets do not hold the
    marker just before `constraint_start` or the answer is not a legal choice prefix.
    """
    marker = constraint.marker
    start_marker = constraint_start - len(marker)
    if start_marker < 0 or constraint_start > len(target_ids):
        raise ValueError(
            f"constraint_start={constraint_start} with a {len(marker)}-token marker does not "
            f"fit {len(target_ids)} targets; it must be the target index of the first answer "
            "token (len(prompt) - 1 + completion.answer_start)"
        )
    if tuple(target_ids[start_marker:constraint_start]) != tuple(marker):
        raise ValueError(
            "the targets just before constraint_start are not the constraint's marker; "
            "constraint_start must be len(prompt) - 1 + completion.answer_start"
        )
    trie = TokenTrie(constraint.choices)
    answer: list[int] = []
    masks: list[tuple[int, tuple[int, ...]]] = []
    for pos in range(constraint_start, len(target_ids)):
        allowed = trie.allowed(answer)
        token = int(target_ids[pos])
        if token not in allowed:
            raise ValueError(
                f"target {token} at position {pos} is not a legal continuation of the answer "
                f"{answer}; allowed {list(allowed)}"
            )
        masks.append((pos, allowed))
        answer.append(token)
    return list(range(start_marker, constraint_start)), masks
