"""LiarsDice-v1: two players, `num_dice` dice each, bid or call until one player has no dice.

Rules (the original's v1 fixes included; docs/games.md):
- Each round every player with dice rolls them in secret (from `self.rng`). Players take
  turns to bid `[Bid: q, f]` ("at least q dice across both hands show face f") or `[Call]`
  the previous bid. No faces are wild.
- A bid is legal if 1 <= f <= 6, 1 <= q <= the total dice still in play, and it is higher
  than the current bid: a larger q (any face), or the same q with a larger f. `[Call]` is
  legal only once a bid exists.
- On a call, face f is counted over both hands. Fewer than q: the last bidder loses a die;
  otherwise the caller loses one. The loser opens the next round with fresh dice (so after
  a call the same seat may well move again: that is normal, not an illegal move). A player
  with no dice left loses the game (+1 / -1).

Choices:
- A call announces the count of the called face, not the dice themselves (as in the
  original); so `private_info(seat)` is the seat's own dice in every round so far plus the
  counts announced at calls - everything chance decides that the seat gets told.
- Accepted move spellings (`parse_action`), all case-insensitive: `[Call]`, and a bid as
  `[Bid: q, f]`, `[Bid q, f]`, `[bid:q f]`, `[Bid: q,f]` - the word "bid", an optional colon,
  then two decimal integers separated by a comma and/or spaces, in brackets. Anything else
  (extra numbers, words like "fives") is rejected rather than guessed.
- `max_turns` defaults to 200 moves (both seats) so games between weak policies end;
  uniformly random play finishes well inside it (see tests).
"""

from __future__ import annotations

import re

from spiral.games.base import State
from spiral.games.registry import register
from spiral.types import Move, Seat

CALL: Move = "[Call]"
FACES = range(1, 7)
_BID_RE = re.compile(r"\[\s*bid\s*:?\s*(\d{1,4})\s*(?:,\s*|\s+)(\d{1,4})\s*\]", re.IGNORECASE)
_CALL_RE = re.compile(r"\[\s*call\s*\]", re.IGNORECASE)


def bid_move(quantity: int, face: int) -> Move:
    """The canonical bid string, e.g. `[Bid: 3, 5]`."""
    return f"[Bid: {quantity}, {face}]"


class LiarsDiceState(State):
    """A game of Liar's Dice; see the module docstring."""

    game_id = "LiarsDice-v1"
    default_obs_style = "history"
    default_max_turns = 200

    def __init__(self, seed: int = 0, num_dice: int = 5, max_turns: int | None = None) -> None:
        super().__init__(seed=seed, max_turns=max_turns)
        if num_dice < 1:
            raise ValueError(f"num_dice must be >= 1, got {num_dice}")
        self.num_dice = num_dice
        self.remaining = [num_dice, num_dice]
        self.dice: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
        self.bid: tuple[int, int] | None = None  # (quantity, face)
        self.last_bidder: Seat | None = None
        self.to_move: Seat = 0
        # Per seat: the dice it saw each round; shared: the counts announced at calls.
        self._seen_dice: tuple[list[tuple[int, ...]], list[tuple[int, ...]]] = ([], [])
        self._announced: list[tuple[int, int]] = []
        for seat in (0, 1):
            self._tell(seat, self._rules(seat))
        self._new_round(starter=0)

    # ---- rules hooks -------------------------------------------------------------
    def _current_player(self) -> Seat:
        return self.to_move

    def _legal_actions(self) -> list[Move]:
        total = sum(self.remaining)
        moves: list[Move] = [CALL] if self.bid is not None else []
        q0, f0 = self.bid if self.bid is not None else (1, 0)
        moves += [bid_move(q0, f) for f in FACES if f > f0]
        moves += [bid_move(q, f) for q in range(q0 + 1, total + 1) for f in FACES]
        return moves

    def parse_action(self, text: str) -> Move | None:
        # Whitespace collapsed first: runs of it would make the bid pattern backtrack
        # quadratically on a long reply.
        stripped = " ".join(text.split())
        if _CALL_RE.fullmatch(stripped):
            return CALL if self.bid is not None and not self.is_terminal() else None
        match = _BID_RE.fullmatch(stripped)
        if match is None or self.is_terminal():
            return None
        quantity, face = int(match.group(1)), int(match.group(2))
        return bid_move(quantity, face) if self._bid_is_legal(quantity, face) else None

    def _apply(self, move: Move) -> None:
        seat, _ = self.move_history[-1]
        self._broadcast(move, sender=f"Player {seat}")
        if move == CALL:
            self._resolve_call(caller=seat)
            return
        match = _BID_RE.fullmatch(move)
        assert match is not None  # canonical bids always match
        self.bid = (int(match.group(1)), int(match.group(2)))
        self.last_bidder = seat
        self.to_move = 1 - seat
        self._broadcast(f"Player {seat} bids {self.bid[0]} of face {self.bid[1]}.")
        self._tell(self.to_move, self._moves_text())

    def _game_over(self) -> bool:
        return min(self.remaining) == 0

    def _returns(self) -> tuple[float, float]:
        return (-1.0, 1.0) if self.remaining[0] == 0 else (1.0, -1.0)

    def private_info(self, seat: Seat) -> tuple[object, ...]:
        return (tuple(self._seen_dice[seat]), tuple(self._announced))

    # ---- helpers -----------------------------------------------------------------
    def _bid_is_legal(self, quantity: int, face: int) -> bool:
        if face not in FACES or not 1 <= quantity <= sum(self.remaining):
            return False
        if self.bid is None:
            return True
        q0, f0 = self.bid
        return quantity > q0 or (quantity == q0 and face > f0)

    def _resolve_call(self, caller: Seat) -> None:
        assert self.bid is not None and self.last_bidder is not None
        quantity, face = self.bid
        count = sum(hand.count(face) for hand in self.dice)
        self._announced.append((face, count))
        if count < quantity:
            loser, verdict = self.last_bidder, f"LESS than {quantity}"
            role = "the last bidder"
        else:
            loser, verdict = caller, f">= {quantity}"
            role = "the caller"
        self.remaining[loser] -= 1
        self._broadcast(
            f"Player {caller} calls! The actual count of face {face} is {count}, which is "
            f"{verdict}.\nPlayer {loser} ({role}) loses one die."
        )
        if self._game_over():
            winner = 1 - loser
            self._broadcast(f"Player {loser} has no dice left. Player {winner} wins the game.")
            return
        self._new_round(starter=loser)

    def _new_round(self, starter: Seat) -> None:
        self.dice = (self._roll(self.remaining[0]), self._roll(self.remaining[1]))
        self.bid, self.last_bidder, self.to_move = None, None, starter
        counts = "; ".join(f"Player {p}: {self.remaining[p]}" for p in (0, 1))
        for seat in (0, 1):
            self._seen_dice[seat].append(self.dice[seat])
            own = ", ".join(map(str, self.dice[seat]))
            self._tell(
                seat,
                f"New round - Remaining dice: {counts}\nYour current dice are: {own}\n"
                f"Player {starter} starts the bidding.",
            )
        self._tell(starter, self._moves_text())

    def _roll(self, n: int) -> tuple[int, ...]:
        return tuple(sorted(self.rng.randint(1, 6) for _ in range(n)))

    def _moves_text(self) -> str:
        """What the seat to move needs in one message (enough for the "latest" style)."""
        total = sum(self.remaining)
        own = ", ".join(map(str, self.dice[self.to_move]))
        head = f"Your dice: {own}. Dice in play: {total}."
        if self.bid is None:
            return f"{head} No bid yet.\nAvailable Moves: '[Bid: q, f]' with 1 <= q <= {total} and 1 <= f <= 6."
        q0, f0 = self.bid
        options = ["'[Call]'"]
        if q0 < total:
            options.append(f"'[Bid: q, f]' with {q0} < q <= {total} (any face)")
        if f0 < 6:
            options.append(f"'[Bid: {q0}, f]' with f > {f0}")
        return (
            f"{head} Current bid: {q0} of face {f0}.\nAvailable Moves: "
            + ", or ".join(options)
            + "."
        )

    def _rules(self, seat: Seat) -> str:
        return (
            f"You are Player {seat} in a 2-player Liar's Dice game. Each player starts with "
            f"{self.num_dice} dice; you see only your own.\n"
            "Rules:\n- On your turn, you may either:\n"
            "  1) Make a new bid with a higher quantity (any face), or the same quantity and a "
            "higher face; i.e. '[Bid: 3, 4]' claims at least three 4s among all dice,\n"
            "  2) Call the last bid by typing '[Call]'.\n\n"
            "If you call:\n  - If the actual count of that face value among all dice is less "
            "than the bid, the last bidder loses one die.\n"
            "  - Otherwise, the caller loses one die.\n"
            "The loser of a round starts the next one, and everyone rolls again. "
            "A player who reaches 0 dice loses; the last remaining player wins."
        )


def make(seed: int = 0, num_dice: int = 5, max_turns: int | None = None) -> LiarsDiceState:
    return LiarsDiceState(seed=seed, num_dice=num_dice, max_turns=max_turns)


register("LiarsDice-v1", make)
