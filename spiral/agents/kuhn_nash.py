"""A Nash-equilibrium Kuhn poker player (OpenSpiel's one-parameter family).

Choices:
- The strategy is the equilibrium family of `kuhn_poker.cc: GetOptimalPolicy(alpha)`,
  alpha in [0, 1/3], as `spiral.games.kuhn_equilibrium` states it (P of the "bet-like"
  move: [bet], or [call] facing a bet). The first mover's value is -1/18 for every alpha.
- Roles are per hand and follow from the hand's betting (the opener decides at "" and
  "pb"), never from the seat number: in KuhnPoker-v1 the opener alternates.
- It reads `card(seat)` and `history_string()` from the state (both Kuhn games expose
  them), never the prompt. `action_probabilities` makes it usable as a
  tabular policy by exploitability code.
"""

from __future__ import annotations

import random

from spiral.agents.base import Agent
from spiral.games.base import State
from spiral.games.kuhn_equilibrium import ALPHA_MAX, nash_bet_probability
from spiral.games.kuhn_poker import BET, CALL, CHECK, FOLD, KuhnPoker, KuhnPokerSingle
from spiral.types import Move


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
        # The hand's history says whose decision it is (opener or responder), whichever
        # seat opened it.
        p_bet = nash_bet_probability(self.alpha, state.card(seat), state.history_string())
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
