"""Leduc Hold'em: LeducPoker-v0, OpenSpiel's `leduc_poker` for two players.

Rules, as OpenSpiel plays them (checked game by game against it, `tests/games/test_leduc.py`):
- Six cards, two of each rank J < Q < K (cards 0..5, rank = card // 2). Each player antes
  1 chip and gets one private card; after the first betting round one public card is
  dealt, then a second round.
- Each round player 0 acts first. With no bet to call a player may check or bet; facing a
  bet, fold, call or raise. A bet or raise is 2 chips in the first round and 4 in the
  second, at most two of them a round. A round ends when both players check or a bet is
  called; a fold ends the game.
- At the showdown a private card that pairs the public card wins; otherwise the higher
  rank; equal ranks split the pot. Returns are the chips won or lost (1 to 13).

Moves: "[check]", "[bet]", "[fold]", "[call]", "[raise]" (OpenSpiel's Call covers check and
call, its Raise bet and raise). `cards=(private0, private1, public)` fixes the deal so that
evaluation can enumerate all 120 deals; `openspiel_actions()` gives the moves so far as
OpenSpiel's action ids, and `info_key(seat)` the seat's information (its card's rank, the
public card's rank once dealt, the moves of each round), which is what a seat's prompt
shows.
"""

from __future__ import annotations

from collections.abc import Sequence

from spiral.games.base import ObsStyle, State, fixed_deal
from spiral.games.registry import register
from spiral.types import Move, Seat

RANKS = ("J", "Q", "K")
CHECK, BET, FOLD, CALL, RAISE = "[check]", "[bet]", "[fold]", "[call]", "[raise]"
RAISE_SIZE = (2, 4)  # per round
MAX_RAISES = 2  # per round, the bet included
OPENSPIEL_ACTION = {FOLD: 0, CHECK: 1, CALL: 1, BET: 2, RAISE: 2}
WORDS = {CHECK: "checked", BET: "bet", FOLD: "folded", CALL: "called", RAISE: "raised"}


def rank(card: int) -> int:
    return card // 2


def _check_deal(cards: Sequence[int]) -> tuple[int, int, int]:
    deal = fixed_deal(cards, 3, 6)
    if deal is None:
        raise ValueError(
            f"cards must be three different whole numbers in 0..5 (rank = card // 2); got {cards!r}"
        )
    return (deal[0], deal[1], deal[2])


class LeducPoker(State):
    """Leduc Hold'em for two players (OpenSpiel's rules): returns are chips."""

    game_id = "LeducPoker-v0"
    default_obs_style: ObsStyle = "history"

    def __init__(
        self,
        seed: int = 0,
        cards: tuple[int, int, int] | None = None,
        max_turns: int | None = None,
    ) -> None:
        super().__init__(seed=seed, max_turns=max_turns)
        if cards is None:
            deck = list(range(6))
            self.rng.shuffle(deck)
            cards = (deck[0], deck[1], deck[2])
        self.cards = _check_deal(cards)
        self.round = 0  # 0: before the public card, 1: after it
        self.rounds: tuple[list[Move], list[Move]] = ([], [])
        self.put_in = [1, 1]
        self._folded: Seat | None = None
        self._over = False
        for seat in (0, 1):
            self._tell(seat, self._rules(seat))
            text = f"Your card is: {RANKS[rank(self.cards[seat])]}"
            if seat == 0:
                text += "\n" + self._actions_line()
            self._tell(seat, text)

    @classmethod
    def chance_outcomes(cls) -> tuple[dict[str, object], ...] | None:
        return tuple(
            {"cards": (a, b, c)}
            for a in range(6)
            for b in range(6)
            for c in range(6)
            if len({a, b, c}) == 3
        )

    # ---- the betting ---------------------------------------------------------------
    def _moves(self) -> list[Move]:
        return self.rounds[self.round]

    def _raises(self) -> int:
        return sum(m in (BET, RAISE) for m in self._moves())

    def _facing_bet(self) -> bool:
        return bool(self._moves()) and self._moves()[-1] in (BET, RAISE)

    def _current_player(self) -> Seat:
        return len(self._moves()) % 2

    def _legal_actions(self) -> list[Move]:
        if not self._facing_bet():
            return [CHECK, BET]
        return [FOLD, CALL, RAISE] if self._raises() < MAX_RAISES else [FOLD, CALL]

    def _apply(self, move: Move) -> None:
        seat = self._current_player()
        owed = self.put_in[1 - seat] - self.put_in[seat]
        if move in (CALL, BET, RAISE):
            self.put_in[seat] += owed
        if move in (BET, RAISE):
            self.put_in[seat] += RAISE_SIZE[self.round]
        self._moves().append(move)
        self._broadcast(move, sender=f"Player {seat}")
        if move == FOLD:
            self._folded = seat
            self._over = True
            self._broadcast(f"Player {seat} has folded. Player {1 - seat} wins the pot.")
            return
        closed = move == CALL or (move == CHECK and len(self._moves()) == 2)
        if not closed:
            self._tell(1 - seat, self._actions_line())
        elif self.round == 0:
            self.round = 1
            self._broadcast(f"The public card is: {RANKS[rank(self.cards[2])]}")
            self._tell(0, self._actions_line())
        else:
            self._over = True
            self._broadcast(self._showdown_text())

    def _game_over(self) -> bool:
        return self._over

    def _returns(self) -> tuple[float, float]:
        loser = self._folded if self._folded is not None else self._showdown_loser()
        if loser is None:
            return (0.0, 0.0)  # equal ranks split the pot
        won = float(self.put_in[loser])
        return (-won, won) if loser == 0 else (won, -won)

    def _showdown_loser(self) -> Seat | None:
        public = rank(self.cards[2])
        strength = [(rank(self.cards[seat]) == public, rank(self.cards[seat])) for seat in (0, 1)]
        if strength[0] == strength[1]:
            return None
        return 1 if strength[0] > strength[1] else 0

    # ---- what the seats are told ---------------------------------------------------
    def _actions_line(self) -> str:
        return f"Your available actions are: {', '.join(self._legal_actions())}"

    def _showdown_text(self) -> str:
        c0, c1 = (RANKS[rank(self.cards[s])] for s in (0, 1))
        loser = self._showdown_loser()
        outcome = (
            "The pot is split."
            if loser is None
            else f"Player {1 - loser} wins {self.put_in[loser]} chips."
        )
        return f"Showdown: Player 0 had {c0}, Player 1 had {c1}. {outcome}"

    @staticmethod
    def _rules(seat: Seat) -> str:
        return (
            f"You are Player {seat} in a hand of Leduc Hold'em.\n"
            "Game Rules:\n"
            "- The deck has six cards: two J, two Q, two K (J lowest, K highest)\n"
            "- Each player antes 1 chip and receives 1 private card; Player 0 acts first "
            "in each of the two betting rounds\n"
            "- After the first round one public card is dealt\n"
            "- A bet or raise adds 2 chips in the first round and 4 in the second; at most "
            "two bets or raises a round\n"
            "- At the showdown a card that pairs the public card wins, else the higher "
            "card; equal cards split the pot\n\n"
            "Action Rules:\n"
            "- '[check]': Pass without betting (only if no bet is on the table)\n"
            "- '[bet]': Bet (only if no bet is on the table)\n"
            "- '[call]': Match the opponent's bet or raise\n"
            "- '[raise]': Match the opponent's bet and add one more\n"
            "- '[fold]': Give up the hand; the opponent wins the pot\n"
        )

    def _betting_text(self, seat: Seat) -> str:
        parts = []
        for number, moves in enumerate(self.rounds[: self.round + 1], 1):
            said = [
                f"{'You' if i % 2 == seat else f'Player {i % 2}'} {WORDS[m]}"
                for i, m in enumerate(moves)
            ]
            parts.append(f"Round {number}: " + (", then ".join(said) if said else "no bets yet"))
        return ". ".join(parts) + "."

    def situation(self, seat: Seat) -> str | None:
        if self.is_terminal():
            return None
        public = (
            f"Public card: {RANKS[rank(self.cards[2])]}. "
            if self.round == 1
            else "No public card yet. "
        )
        return (
            f"{self._betting_text(seat)}\n{public}Pot: {sum(self.put_in)} chips, "
            f"{self.put_in[seat]} of them yours.\nYour card: {RANKS[rank(self.cards[seat])]}."
        )

    def brief(self, seat: Seat) -> str | None:
        situation = self.situation(seat)
        if situation is None:
            return None
        return (
            "One hand of Leduc Hold'em: two each of J < Q < K, ante 1, bets of 2 then 4, a "
            "private card pairing the public card wins.\n" + situation
        )

    def private_info(self, seat: Seat) -> tuple[object, ...]:
        return (rank(self.cards[seat]),)

    def public_info(self) -> tuple[object, ...]:
        """The public card's rank: chance both seats see (after the first round)."""
        return (rank(self.cards[2]),)

    def info_key(self, seat: Seat) -> tuple[object, ...]:
        """What `seat` knows: its card's rank, the public card's rank once dealt (-1
        before), and each round's moves."""
        public = rank(self.cards[2]) if self.round == 1 else -1
        return (rank(self.cards[seat]), public, tuple(self.rounds[0]), tuple(self.rounds[1]))

    def openspiel_actions(self) -> list[int]:
        """The moves so far as OpenSpiel's `leduc_poker` action ids, chance excluded."""
        return [OPENSPIEL_ACTION[m] for moves in self.rounds for m in moves]


register(LeducPoker.game_id, LeducPoker)
