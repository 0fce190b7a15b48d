"""A Nash-equilibrium Kuhn poker player (OpenSpiel's one-parameter family).

Choices:
- The strategy is the equilibrium family of `kuhn_poker.cc: GetOptimalPolicy(alpha)`,
  alpha in [0, 1/3] (docs/games.md, "Known values"). Probabilities are of the "bet-like"
  move: [bet] when no bet is on the table, [call] when facing one; the rest goes to
  [check] or [fold]. Under it the first mover's value is -1/18 for every alpha.
- Roles are per hand: the seat that opens the hand plays the table's "P0" rows. In
  KuhnPokerSingle-v0 that is seat 0; in KuhnPoker-v1 the opener alternates and player 1
  opens hand 1, so the agent reads `state.first_mover`, never the seat number.
- It reads `card(seat)`, `first_mover` and `history_string()` from the state (both Kuhn
  games expose them), never the prompt. `action_probabilities` makes it usable as a
  tabular policy by exploitability code.
"""

from __future__ import annotations

import random

from spiral.agents.base import Agent
from spiral.games.base import State
from spiral.games.kuhn_poker import BET, CALL, CHECK, FOLD, KuhnPoker, KuhnPokerSingle
from spiral.types import Move

JACK, QUEEN, KING = 0, 1, 2
ALPHA_MAX = 1.0 / 3.0


def bet_probability(alpha: float, role: int, card: int, history: str) -> float:
    """P(bet or call) for the player in `role` (0 = opener) holding `card` after `history`.

    `history` uses OpenSpiel letters ('p' check/fold, 'b' bet/call): the opener decides at
    "" and "pb", the responder at "p" and "b".
    """
    table: dict[tuple[int, int, str], float] = {
        # opener: bluff J with alpha, check Q, value-bet K with 3*alpha
        (0, JACK, ""): alpha,
        (0, QUEEN, ""): 0.0,
        (0, KING, ""): 3.0 * alpha,
        # opener after check-bet: fold J, call Q with 1/3 + alpha, call K
        (0, JACK, "pb"): 0.0,
        (0, QUEEN, "pb"): 1.0 / 3.0 + alpha,
        (0, KING, "pb"): 1.0,
        # responder after a check: bluff J 1/3, check Q, bet K
        (1, JACK, "p"): 1.0 / 3.0,
        (1, QUEEN, "p"): 0.0,
        (1, KING, "p"): 1.0,
        # responder facing a bet: fold J, call Q 1/3, call K
        (1, JACK, "b"): 0.0,
        (1, QUEEN, "b"): 1.0 / 3.0,
        (1, KING, "b"): 1.0,
    }
    key = (role, card, history)
    if key not in table:
        raise ValueError(f"no Kuhn decision for role {role}, card {card}, history {history!r}")
    return table[key]


class KuhnNashAgent(Agent):
    """Plays the alpha-equilibrium of Kuhn poker in each hand."""

    name = "kuhn_nash"

    def __init__(self, alpha: float = 1.0 / 6.0, seed: int = 0) -> None:
        if not 0.0 <= alpha <= ALPHA_MAX + 1e-12:
            raise ValueError(f"alpha must be in [0, 1/3] for a Kuhn equilibrium; got {alpha}")
        self.alpha = alpha
        self.rng = random.Random(seed)

    def action_probabilities(self, state: State) -> dict[Move, float]:
        """The equilibrium's distribution over the legal moves of the seat to move."""
        if not isinstance(state, KuhnPoker | KuhnPokerSingle):
            raise TypeError(
                f"KuhnNashAgent plays KuhnPoker-v1 and KuhnPokerSingle-v0, got {state.game_id!r}"
            )
        seat = state.current_player()
        if seat < 0:
            raise ValueError("the game is over: no move to choose")
        role = 0 if seat == state.first_mover else 1
        p_bet = bet_probability(self.alpha, role, state.card(seat), state.history_string())
        legal = state.legal_actions()
        bet_like = BET if BET in legal else CALL
        pass_like = CHECK if CHECK in legal else FOLD
        return {pass_like: 1.0 - p_bet, bet_like: p_bet}

    def act(self, state: State) -> Move:
        probs = self.action_probabilities(state)
        moves = list(probs)
        return self.rng.choices(moves, weights=[probs[m] for m in moves])[0]


def make_kuhn_nash(seed: int = 0, alpha: float = 1.0 / 6.0) -> Agent:
    """Factory registered as the `optimal` player for both Kuhn games."""
    return KuhnNashAgent(alpha=alpha, seed=seed)
