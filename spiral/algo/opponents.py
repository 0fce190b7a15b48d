"""Which past policy to play: prioritised fictitious self-play.

Plain fictitious self-play draws pool members uniformly. Prioritised FSP (AlphaStar's
"variance" weighting) draws a member in proportion to x(1 - x), where x is the current
policy's win rate against it: members the policy always beats (x near 1) or always loses
to (x near 0) teach little; the even ones teach most. The win rate is smoothed with one
virtual win and one virtual loss (draws count half), so a member not met yet has x = 0.5,
the highest weight: every new member is tried first.
"""

from __future__ import annotations

from collections.abc import Iterable

Record = tuple[int, int, int]  # (wins, draws, losses) of the policy against one opponent


def smoothed_win_rate(record: Record) -> float:
    """(wins + draws / 2 + 1) / (games + 2): the policy's win rate, one virtual win and one
    virtual loss added."""
    wins, draws, losses = record
    return (wins + 0.5 * draws + 1.0) / (wins + draws + losses + 2.0)


def variance_weight(record: Record) -> float:
    """x (1 - x) of the smoothed win rate x: 0.25 for an even or unmet opponent, towards 0
    for one always beaten or always losing."""
    x = smoothed_win_rate(record)
    return x * (1.0 - x)


def summed(records: Iterable[Record]) -> Record:
    """One record of several (an opponent met under several labels, one per game)."""
    wins = draws = losses = 0
    for w, d, lo in records:
        wins, draws, losses = wins + w, draws + d, losses + lo
    return wins, draws, losses
