"""The Nash equilibria of single-hand Kuhn poker: OpenSpiel's one-parameter family.

Every equilibrium of the game is `nash_bet_probability(alpha, ...)` for one alpha in
[0, 1/3] (the family of `kuhn_poker.cc: GetOptimalPolicy`, docs/games.md "Known values").
Probabilities are of the "bet-like" move: [bet] when no bet is on the table, [call] when
facing one; the rest goes to [check] or [fold]. Under every member the opener's value is
-1/18. A fact about the game, so it lives with the game: the Nash player (agents) plays
it and the run report (report) draws a trained policy beside it.

An information state is named by the card and the betting so far in OpenSpiel's letters
('p' check or fold, 'b' bet or call): the opener decides at "" and "pb", the responder at
"p" and "b", so `Qpb` is the opener holding the queen after check, bet.
"""

from __future__ import annotations

JACK, QUEEN, KING = 0, 1, 2
CARDS = ("J", "Q", "K")
ALPHA_MAX = 1.0 / 3.0

_TABLE: dict[tuple[int, str], tuple[float, float]] = {
    # (card, history): P(bet or call) = a + b * alpha
    # opener: bluff J with alpha, check Q, value-bet K with 3*alpha
    (JACK, ""): (0.0, 1.0),
    (QUEEN, ""): (0.0, 0.0),
    (KING, ""): (0.0, 3.0),
    # opener after check-bet: fold J, call Q with 1/3 + alpha, call K
    (JACK, "pb"): (0.0, 0.0),
    (QUEEN, "pb"): (1.0 / 3.0, 1.0),
    (KING, "pb"): (1.0, 0.0),
    # responder after a check: bluff J 1/3, check Q, bet K
    (JACK, "p"): (1.0 / 3.0, 0.0),
    (QUEEN, "p"): (0.0, 0.0),
    (KING, "p"): (1.0, 0.0),
    # responder facing a bet: fold J, call Q 1/3, call K
    (JACK, "b"): (0.0, 0.0),
    (QUEEN, "b"): (1.0 / 3.0, 0.0),
    (KING, "b"): (1.0, 0.0),
}


def nash_bet_probability(alpha: float, card: int, history: str) -> float:
    """P(bet or call) holding `card` after `history` in the alpha-equilibrium."""
    if (card, history) not in _TABLE:
        raise ValueError(f"no Kuhn decision for card {card}, history {history!r}")
    base, slope = _TABLE[(card, history)]
    return base + slope * alpha


def nash_bet_range(state: str) -> tuple[float, float]:
    """The lowest and highest P(bet or call) at the information state `state` (e.g.
    "Qpb") over the whole equilibrium family: what a Nash policy may do there."""
    card, history = CARDS.index(state[0]), state[1:]
    ends = (nash_bet_probability(a, card, history) for a in (0.0, ALPHA_MAX))
    low, high = sorted(ends)
    return low, high
