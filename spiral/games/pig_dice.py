"""PigDice-v1: roll to build a turn total, hold to bank it; first to `winning_score` wins.

Rules (docs/games.md):
- On your turn, `[roll]` a die (from `self.rng`): 2-6 adds to your turn total and you go
  on (the same seat moves again - normal, not an illegal move); a 1 loses the turn total
  and passes the turn. `[hold]` banks the turn total and passes the turn.
- Banking a score >= `winning_score` (50) wins at once (+1 / -1).
- After `turn_cap` (50) passed turns (holds and busts, both seats counted) without a
  winner, the game ends by score: the higher banked score wins, equal scores draw. This
  is a rule of the game, not truncation (`truncated()` stays False). The original checked
  `turn_count + 1 >= 50`, i.e. stopped after 49 passes; we stop after exactly `turn_cap`.

Choices:
- `parse_action` also accepts the original's shorthands `[r]` and `[h]` (any case).
- The seat to move is told the scores, its turn total and the moves after every event,
  so the "latest" observation style is enough to play.
- No default `max_turns`: every turn ends with probability 1 (a roll busts with p = 1/6)
  and the pass cap bounds the number of turns.
"""

from __future__ import annotations

from spiral.games.base import State, normalize_move_text
from spiral.games.registry import register
from spiral.types import Move, Seat

ROLL: Move = "[roll]"
HOLD: Move = "[hold]"
_ALIASES = {"[roll]": ROLL, "[r]": ROLL, "[hold]": HOLD, "[h]": HOLD}


class PigDiceState(State):
    """A game of Pig; see the module docstring."""

    game_id = "PigDice-v1"
    default_obs_style = "history"

    def __init__(
        self,
        seed: int = 0,
        winning_score: int = 50,
        turn_cap: int = 50,
        max_turns: int | None = None,
    ) -> None:
        super().__init__(seed=seed, max_turns=max_turns)
        if winning_score < 1 or turn_cap < 1:
            raise ValueError(
                f"winning_score and turn_cap must be >= 1, got {winning_score}, {turn_cap}"
            )
        self.winning_score = winning_score
        self.turn_cap = turn_cap
        self.scores = [0, 0]
        self.turn_total = 0
        self.to_move: Seat = 0
        self.passes = 0
        self._finished = False
        for seat in (0, 1):
            self._tell(seat, self._rules(seat))
        self._tell(0, self._status())

    # ---- rules hooks -------------------------------------------------------------
    def _current_player(self) -> Seat:
        return self.to_move

    def _legal_actions(self) -> list[Move]:
        return [ROLL, HOLD]

    def parse_action(self, text: str) -> Move | None:
        if self.is_terminal():
            return None
        return _ALIASES.get(normalize_move_text(text))

    def _apply(self, move: Move) -> None:
        seat = self.to_move
        self._broadcast(move, sender=f"Player {seat}")
        if move == ROLL:
            roll = self.rng.randint(1, 6)
            if roll == 1:
                self._broadcast(
                    f"Player {seat} rolled a 1 and loses the turn total of {self.turn_total}."
                )
                self._pass_turn()
            else:
                self.turn_total += roll
                self._broadcast(f"Player {seat} rolled a {roll}. Turn total: {self.turn_total}.")
                self._tell(seat, self._status())
            return
        self.scores[seat] += self.turn_total
        self._broadcast(
            f"Player {seat} holds, banking {self.turn_total}. Score: {self.scores[seat]}."
        )
        if self.scores[seat] >= self.winning_score:
            self._finished = True
            self._broadcast(f"Player {seat} reached {self.winning_score} and wins the game.")
            return
        self._pass_turn()

    def _game_over(self) -> bool:
        return self._finished

    def _returns(self) -> tuple[float, float]:
        s0, s1 = self.scores
        if s0 == s1:
            return (0.0, 0.0)
        return (1.0, -1.0) if s0 > s1 else (-1.0, 1.0)

    # ---- helpers -----------------------------------------------------------------
    def _pass_turn(self) -> None:
        self.turn_total = 0
        self.passes += 1
        if self.passes >= self.turn_cap:
            self._finished = True
            s0, s1 = self.scores
            verdict = "a draw" if s0 == s1 else f"Player {0 if s0 > s1 else 1} wins"
            self._broadcast(
                f"The turn cap ({self.turn_cap}) was reached with scores {s0} - {s1}: {verdict}."
            )
            return
        self.to_move = 1 - self.to_move
        self._tell(self.to_move, self._status())

    def _status(self) -> str:
        s0, s1 = self.scores
        return (
            f"Scores: Player 0: {s0}, Player 1: {s1}. Your turn total: "
            f"{self.turn_total}. Turns passed: {self.passes} of {self.turn_cap}.\n"
            f"Available Moves: '{ROLL}', '{HOLD}'"
        )

    def _rules(self, seat: Seat) -> str:
        return (
            f"You are Player {seat} playing a game of Pig Dice.\n"
            "Rules:\n- On your turn, you can either '[roll]' or '[hold]'\n"
            "- Roll a 2-6: Add to your turn total\n"
            "- Roll a 1: Lose turn total and end turn\n"
            "- Hold: Add turn total to your score and end turn\n"
            f"- First to {self.winning_score} points wins\n"
            f"- After {self.turn_cap} turns in total, the higher score wins (equal is a draw)\n\n"
            "When it's your turn, you'll see the current scores and turn total.\n"
            "Respond with '[roll]' to roll the die or '[hold]' to bank your points."
        )


def make(
    seed: int = 0, winning_score: int = 50, turn_cap: int = 50, max_turns: int | None = None
) -> PigDiceState:
    return PigDiceState(
        seed=seed, winning_score=winning_score, turn_cap=turn_cap, max_turns=max_turns
    )


register("PigDice-v1", make)
