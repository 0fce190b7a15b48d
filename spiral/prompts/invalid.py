"""What an invalid move costs: one declared policy, applied to every invalid move.

An invalid move (no answer, an illegal one, an ambiguous or truncated reply) ends the
game; the offender gets `offender` and the other seat `other`. Policies are a small
registry:

- "spiral" (default): -1.5 / +0.5, the original's ILLEGAL_MOVE_REWARD for moves its own
  validator rejected. The extra -0.5 beyond a loss pushes the policy to learn the format
  first; the game is then not zero-sum.
- "strict": -1 / +1, an invalid move is simply a loss (zero-sum; the original's online
  evaluation used this).
- "loss": -1 / 0, the offender loses and the other seat gets nothing, as TextArena scores
  invalid moves it detects itself.

The original scored invalid moves from two sources differently: its validator's sentinel
got -1.5 / +0.5, while moves the environment rejected kept TextArena's -1 / 0 (docs/original.md,
"Invalid moves"), so the same mistake could cost different amounts. We apply the one declared
policy to every invalid move, whoever detects it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from spiral.types import Seat


@dataclass(frozen=True)
class InvalidMovePolicy:
    """Returns given when a seat makes an invalid move: `offender` to it, `other` to the
    opponent."""

    name: str
    offender: float
    other: float

    def returns(self, offender_seat: Seat) -> tuple[float, float]:
        """Per-seat returns (seat 0, seat 1) of a game ended by `offender_seat`."""
        if offender_seat not in (0, 1):
            raise ValueError(f"offender_seat must be 0 or 1, got {offender_seat!r}")
        if offender_seat == 0:
            return (self.offender, self.other)
        return (self.other, self.offender)

    @property
    def zero_sum(self) -> bool:
        return self.offender + self.other == 0


# The registered names below, as a type for configs (checked against them at import).
InvalidPolicyName = Literal["spiral", "strict", "loss"]
INVALID_POLICIES: dict[str, InvalidMovePolicy] = {
    p.name: p
    for p in (
        InvalidMovePolicy("spiral", offender=-1.5, other=0.5),
        InvalidMovePolicy("strict", offender=-1.0, other=1.0),
        InvalidMovePolicy("loss", offender=-1.0, other=0.0),
    )
}
assert tuple(INVALID_POLICIES) == get_args(InvalidPolicyName)
DEFAULT_INVALID_POLICY = "spiral"


def invalid_policy(name: str) -> InvalidMovePolicy:
    """The registered policy called `name`."""
    if name not in INVALID_POLICIES:
        raise KeyError(
            f"unknown invalid-move policy {name!r}; valid: {', '.join(INVALID_POLICIES)}"
        )
    return INVALID_POLICIES[name]
