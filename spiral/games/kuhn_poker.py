"""Kuhn poker: KuhnPoker-v1 (SPIRAL's 5-hand match, with real chips) and KuhnPokerSingle-v0.

Choices:
- One betting round per hand over a J < Q < K deck, ante 1, bet 1. Moves are "[check]",
  "[bet]", "[fold]", "[call]". The action tree is check -> {check: showdown, bet -> {fold,
  call: showdown}}, bet -> {fold, call: showdown}.
- REAL chips (unlike the original, whose pot was always 2; see docs/original.md):
  the pot holds both antes plus every bet and call, a fold gives it to the other seat, a
  showdown to the higher card. So a check-down or a fold moves 1 chip net, a called bet 2.
- KuhnPoker-v1 plays `max_rounds` hands (5). As in the original, PLAYER 1 OPENS HAND 1 and
  the opener alternates; the deck is reshuffled every hand; chip counts start at 0 and the
  antes drive them negative. After the last hand the chip leader wins (+1/-1), equal chips
  draw. When a hand ends the next hand is dealt at once and its opener simply becomes the
  current player (the original's lazy round start made turn order look "illegal").
  Messages reproduce the original's ("Starting round r out of R rounds.\\nYour card is: X",
  "Your available actions are: [check], [bet]", showdown and fold results to both seats),
  plus a chip-count line after each hand. Default observation style: "history".
- KuhnPokerSingle-v0 is standard one-hand Kuhn poker in OpenSpiel's convention: player 0
  acts first, returns are the chips won or lost (+-1 or +-2, not win/loss signs).
  `cards=(c0, c1)` (0=J, 1=Q, 2=K) fixes the deal so evaluation can enumerate the six
  deals; `history_string()` gives OpenSpiel's letters ('p' = check/fold, 'b' = bet/call),
  so "<card><history>" is OpenSpiel's kuhn_poker information state string.
- Both expose `card(seat)`, `first_mover` (the seat in the "P0" role of the hand being
  played) and `history_string()` for scripted players, which never read prompt text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spiral.games.base import ObsStyle, State, fixed_deal
from spiral.games.registry import register
from spiral.types import Move, Seat

CARD_NAMES = ("J", "Q", "K")
CHECK, BET, FOLD, CALL = "[check]", "[bet]", "[fold]", "[call]"
# Betting history of the hand (moves so far) -> legal moves; absent = the hand is over.
_LEGAL: dict[tuple[Move, ...], tuple[Move, ...]] = {
    (): (CHECK, BET),
    (CHECK,): (CHECK, BET),
    (CHECK, BET): (FOLD, CALL),
    (BET,): (FOLD, CALL),
}
_LETTER = {CHECK: "p", FOLD: "p", BET: "b", CALL: "b"}  # OpenSpiel's pass/bet letters


@dataclass(frozen=True)
class HandResult:
    """How a finished hand went: who took the pot, its size, the net chips won."""

    winner: Seat
    pot: int
    net: int  # chips the winner gained (= what the loser put in)
    showdown: bool


class Hand:
    """One hand of Kuhn poker: cards, who opens, the bets so far. Mutable, owned by a State."""

    def __init__(self, cards: tuple[int, int], opener: Seat, ante: int, bet: int) -> None:
        self.cards = cards
        self.opener = opener
        self.ante = ante
        self.bet = bet
        self.moves: list[Move] = []

    def to_act(self) -> Seat:
        return self.opener if len(self.moves) % 2 == 0 else 1 - self.opener

    def legal(self) -> tuple[Move, ...]:
        return _LEGAL.get(tuple(self.moves), ())

    def history_string(self) -> str:
        return "".join(_LETTER[m] for m in self.moves)

    def result(self) -> HandResult | None:
        """The outcome once the hand is over, else None."""
        if tuple(self.moves) in _LEGAL:
            return None
        put_in = [self.ante, self.ante]
        for i, move in enumerate(self.moves):
            if move in (BET, CALL):
                put_in[self.opener if i % 2 == 0 else 1 - self.opener] += self.bet
        pot = put_in[0] + put_in[1]
        if self.moves[-1] == FOLD:
            folder = self.opener if (len(self.moves) - 1) % 2 == 0 else 1 - self.opener
            return HandResult(winner=1 - folder, pot=pot, net=put_in[folder], showdown=False)
        winner = 0 if self.cards[0] > self.cards[1] else 1
        return HandResult(winner=winner, pot=pot, net=put_in[1 - winner], showdown=True)


def _actions_line(moves: tuple[Move, ...]) -> str:
    return f"Your available actions are: {', '.join(moves)}"


def _result_message(hand: Hand, result: HandResult) -> list[str]:
    """The broadcast lines that close a hand (the original's wording)."""
    if not result.showdown:
        folder = 1 - result.winner
        return [
            f"Player {folder} has folded. Player {result.winner} wins pot of {result.pot} chips."
        ]
    c0, c1 = (CARD_NAMES[c] for c in hand.cards)
    win_card = CARD_NAMES[hand.cards[result.winner]]
    lose_card = CARD_NAMES[hand.cards[1 - result.winner]]
    return [
        f"Cards: Player 0 had {c0}, Player 1 had {c1}",
        f"Showdown: Player {result.winner}'s {win_card} beats Player {1 - result.winner}'s "
        f"{lose_card}. Player {result.winner} wins pot of {result.pot} chips.",
    ]


def _check_card_pair(cards: Sequence[int]) -> tuple[int, int]:
    deal = fixed_deal(cards, 2, 3)
    if deal is None:
        raise ValueError(
            f"cards must be two different ranks in 0..2 (0=J, 1=Q, 2=K); got {cards!r}"
        )
    return (deal[0], deal[1])


class _KuhnBase(State):
    """Shared plumbing: a current `Hand`, legal moves from its tree, action broadcast."""

    default_obs_style: ObsStyle = "history"
    _hand: Hand

    def card(self, seat: Seat) -> int:
        """`seat`'s card in the hand being played (0=J, 1=Q, 2=K)."""
        return self._hand.cards[seat]

    @property
    def first_mover(self) -> Seat:
        """The seat that opens the current hand (the "P0" role in Kuhn strategy tables)."""
        return self._hand.opener

    def history_string(self) -> str:
        """The current hand's betting so far in OpenSpiel letters, e.g. "pb"."""
        return self._hand.history_string()

    def _current_player(self) -> Seat:
        return self._hand.to_act()

    def _betting_text(self, seat: Seat) -> str:
        """The betting of the current hand as `seat` sees it, in words."""
        opener, bet = self._hand.opener, self._hand.bet
        if not self._hand.moves:
            first = "you act first" if seat == opener else f"Player {opener} acts first"
            return f"No bets yet: {first}."
        chips = f"bet {bet} chip{'' if bet == 1 else 's'}"
        words = {CHECK: "checked", BET: chips, FOLD: "folded", CALL: "called"}
        parts = []
        for i, move in enumerate(self._hand.moves):
            actor = self._hand.opener if i % 2 == 0 else 1 - self._hand.opener
            who = "You" if actor == seat else f"Player {actor}"
            parts.append(f"{who} {words[move]}")
        return "Betting so far: " + ", then ".join(parts) + "."

    def situation(self, seat: Seat) -> str | None:
        if self.is_terminal():
            return None
        return f"{self._betting_text(seat)}\nYour card: {CARD_NAMES[self._hand.cards[seat]]}."

    def _legal_actions(self) -> list[Move]:
        return list(self._hand.legal())

    def _deal(self) -> tuple[int, int]:
        deck = [0, 1, 2]
        self.rng.shuffle(deck)
        return (deck[0], deck[1])

    def _play(self, move: Move) -> HandResult | None:
        """Apply `move` to the hand, announce it, and tell the next seat its options."""
        seat = self._hand.to_act()
        self._hand.moves.append(move)
        self._broadcast(move, sender=f"Player {seat}")
        result = self._hand.result()
        if result is None:
            self._tell(1 - seat, _actions_line(self._hand.legal()))
        else:
            for line in _result_message(self._hand, result):
                self._broadcast(line)
        return result


class KuhnPoker(_KuhnBase):
    """SPIRAL's KuhnPoker-v1 with real chips: `max_rounds` hands, the chip leader wins."""

    game_id = "KuhnPoker-v1"

    def __init__(
        self,
        seed: int = 0,
        max_rounds: int = 5,
        ante: int = 1,
        bet: int = 1,
        max_turns: int | None = None,
    ) -> None:
        super().__init__(seed=seed, max_turns=max_turns)
        if max_rounds < 1 or ante < 1 or bet < 1:
            raise ValueError(f"need max_rounds, ante, bet >= 1; got {max_rounds}, {ante}, {bet}")
        self.max_rounds = max_rounds
        self.ante = ante
        self.bet = bet
        self._chips = [0, 0]
        self._round = 0  # 1-based number of the hand being played
        self._over = False
        # (own card, opponent card if shown at showdown else -1) per hand, per seat.
        self._seen: tuple[list[tuple[int, int]], list[tuple[int, int]]] = ([], [])
        for seat in (0, 1):
            self._tell(seat, self._rules(seat))
        self._start_hand()

    @property
    def chips(self) -> tuple[int, int]:
        """Net chips per seat so far (start at 0; the antes of the live hand are taken)."""
        return (self._chips[0], self._chips[1])

    @property
    def round(self) -> int:
        """1-based number of the hand being played (max_rounds once the game is over)."""
        return self._round

    def private_info(self, seat: Seat) -> tuple[object, ...]:
        """What `seat` knows beyond the public moves: its cards, and cards shown to it."""
        return tuple(self._seen[seat])

    def situation(self, seat: Seat) -> str | None:
        hand = super().situation(seat)
        if hand is None:
            return None
        mine, theirs = self._chips[seat], self._chips[1 - seat]
        return (
            f"Round {self._round} of {self.max_rounds}. Chips so far: you {mine}, "
            f"opponent {theirs}.\n{hand}"
        )

    def _rules(self, seat: Seat) -> str:
        r, a, b = self.max_rounds, self.ante, self.bet
        return (
            f"You are Player {seat} in a {r} round game of Kuhn Poker.\n"
            "Game Rules:\n"
            "- Kuhn Poker uses a 3-card deck with J, Q, K (J lowest, K highest)\n"
            f"- Each player antes {a} chip and receives 1 card each round\n"
            f"- Game continues for {r} rounds; the first player to act alternates each round\n"
            "- The player with the most chips after all rounds wins\n\n"
            "Action Rules:\n"
            "- '[check]': Pass without betting (only if no bet is on the table)\n"
            f"- '[bet]': Add {b} chip to the pot (only if no bet is on the table)\n"
            f"- '[call]': Match an opponent's bet by adding {b} chip to the pot\n"
            "- '[fold]': Surrender your hand and let your opponent win the pot\n"
        )

    def _start_hand(self) -> None:
        self._round += 1
        opener = self._round % 2  # hand 1 -> player 1, then alternate (the original's order)
        self._hand = Hand(self._deal(), opener, self.ante, self.bet)
        for seat in (0, 1):
            self._chips[seat] -= self.ante
            self._seen[seat].append((self._hand.cards[seat], -1))
            text = (
                f"Starting round {self._round} out of {self.max_rounds} rounds.\n"
                f"Your card is: {CARD_NAMES[self._hand.cards[seat]]}"
            )
            if seat == opener:
                text += "\n" + _actions_line(self._hand.legal())
            self._tell(seat, text)

    def _apply(self, move: Move) -> None:
        if move in (BET, CALL):
            self._chips[self._hand.to_act()] -= self.bet
        result = self._play(move)
        if result is None:
            return
        self._chips[result.winner] += result.pot
        if result.showdown:
            for seat in (0, 1):
                self._seen[seat][-1] = (self._hand.cards[seat], self._hand.cards[1 - seat])
        self._broadcast(
            f"Chips after round {self._round}: Player 0 has {self._chips[0]}, "
            f"Player 1 has {self._chips[1]}."
        )
        if self._round < self.max_rounds:
            self._start_hand()
            return
        self._over = True
        c0, c1 = self._chips
        if c0 == c1:
            self._broadcast(
                f"At the end of {self.max_rounds} rounds, both players had the same number "
                "of chips. The game is a draw."
            )
        else:
            leader = 0 if c0 > c1 else 1
            self._broadcast(
                f"Player {leader} won by having more chips at the end of all "
                f"{self.max_rounds} rounds."
            )

    def _game_over(self) -> bool:
        return self._over

    def _returns(self) -> tuple[float, float]:
        c0, c1 = self._chips
        if c0 == c1:
            return (0.0, 0.0)
        return (1.0, -1.0) if c0 > c1 else (-1.0, 1.0)


class KuhnPokerSingle(_KuhnBase):
    """Standard one-hand Kuhn poker (OpenSpiel): player 0 opens, returns are chips."""

    game_id = "KuhnPokerSingle-v0"

    def __init__(
        self,
        seed: int = 0,
        cards: tuple[int, int] | None = None,
        max_turns: int | None = None,
    ) -> None:
        super().__init__(seed=seed, max_turns=max_turns)
        dealt = self._deal() if cards is None else _check_card_pair(cards)
        self._hand = Hand(dealt, opener=0, ante=1, bet=1)
        self._result: HandResult | None = None
        for seat in (0, 1):
            self._tell(seat, self._rules(seat))
            text = f"Your card is: {CARD_NAMES[dealt[seat]]}"
            if seat == 0:
                text += "\n" + _actions_line(self._hand.legal())
            self._tell(seat, text)

    @classmethod
    def chance_outcomes(cls) -> tuple[dict[str, object], ...] | None:
        return tuple({"cards": (a, b)} for a in range(3) for b in range(3) if a != b)

    @property
    def cards(self) -> tuple[int, int]:
        """Both seats' cards (0=J, 1=Q, 2=K). For evaluation code, never for a seat's view."""
        return self._hand.cards

    def private_info(self, seat: Seat) -> tuple[object, ...]:
        return (self._hand.cards[seat],)

    def brief(self, seat: Seat) -> str | None:
        situation = self.situation(seat)
        if situation is None:
            return None
        return (
            "One hand of Kuhn poker: cards J < Q < K, each player antes 1 chip, a bet or "
            "a call adds 1, the higher card wins at showdown.\n" + situation
        )

    @staticmethod
    def _rules(seat: Seat) -> str:
        return (
            f"You are Player {seat} in a single hand of Kuhn Poker.\n"
            "Game Rules:\n"
            "- Kuhn Poker uses a 3-card deck with J, Q, K (J lowest, K highest)\n"
            "- Each player antes 1 chip and receives 1 card; Player 0 acts first\n"
            "- You win or lose the chips in the pot: 1 if nobody bets or someone folds to a "
            "bet, 2 if a bet is called\n\n"
            "Action Rules:\n"
            "- '[check]': Pass without betting (only if no bet is on the table)\n"
            "- '[bet]': Add 1 chip to the pot (only if no bet is on the table)\n"
            "- '[call]': Match an opponent's bet by adding 1 chip to the pot\n"
            "- '[fold]': Surrender your hand and let your opponent win the pot\n"
        )

    def _apply(self, move: Move) -> None:
        self._result = self._play(move)

    def _game_over(self) -> bool:
        return self._result is not None

    def _returns(self) -> tuple[float, float]:
        assert self._result is not None  # only called once _game_over() is True
        net = float(self._result.net)
        return (net, -net) if self._result.winner == 0 else (-net, net)


register(KuhnPoker.game_id, KuhnPoker)
register(KuhnPokerSingle.game_id, KuhnPokerSingle)
