"""SimpleNegotiation-v1 (Wood/Gold, fixed values) and -v2 (five resources, random setup).

Rules (docs/games.md), as we implement them:
- Seats alternate; the game lasts `num_turns` moves in total (10; the original called this
  `max_turns`, a name our base class uses for the truncation guard instead).
- A move is `[Offer: <give> -> <receive>]`, `[Accept]` or `[Deny]`. An offer stays open
  for exactly one move: the other seat accepts, denies, or counter-offers (which denies).
  So Accept/Deny are legal only when an offer addressed to the mover is pending.
- An accepted trade runs only if both sides hold the goods. Accepting without holding what
  was asked is not legal (not in `legal_actions()`); if the proposer no longer holds what
  it offered, the trade is cancelled without penalty.
- Each seat scores the change in its inventory's value by its own values; the larger change
  wins (+1/-1), equal changes draw.

Choices:
- Values are private: each seat is told only its own (`private_info(seat)` returns them,
  with the chance-drawn starting inventories), as in the original prompts. Inventories are public: v1's are fixed and stated, and in v2
  we tell both seats both starting inventories. The original showed v2 inventories only
  to their owner, but a cancelled trade revealed the proposer's holdings anyway.
- `legal_actions()` is a finite menu (Accept/Deny when applicable, plus one-resource-each-
  side offers with quantities up to `min(holding, cap)` given and `cap` asked);
  `parse_action` accepts any well-formed offer (spiral.games.offers grammar) that does not
  name one resource on both sides, and returns its canonical string. Offers of goods the
  proposer does not hold are legal moves, as in the original; they just cannot execute.
- v2's setup follows TextArena/SPIRAL: quantities uniform in 5..25, values base +-20%
  (integer, clipped to [5, 40]), drawn from `self.rng` so the seed fixes the game.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from spiral.games.base import State, normalize_move_text
from spiral.games.offers import Item, Offer, format_items, format_offer, parse_offer
from spiral.games.registry import register
from spiral.types import Move, Seat

ACCEPT: Move = "[Accept]"
DENY: Move = "[Deny]"
V1_RESOURCES = ("Wood", "Gold")
V1_VALUES = ({"Wood": 5, "Gold": 15}, {"Wood": 15, "Gold": 5})
V2_BASE_VALUES = {"Wheat": 5, "Wood": 10, "Sheep": 15, "Brick": 25, "Gold": 40}


class NegotiationState(State):
    """A two-seat barter game over `resources`; see the module docstring for the rules."""

    default_obs_style = "history"

    def __init__(
        self,
        seed: int = 0,
        *,
        game_id: str,
        resources: Sequence[str],
        holdings: Sequence[Mapping[str, int]] | None = None,
        values: Sequence[Mapping[str, int]] | None = None,
        num_turns: int = 10,
        menu_cap: int = 5,
        max_turns: int | None = None,
    ) -> None:
        super().__init__(seed=seed, max_turns=max_turns)
        if num_turns < 1 or menu_cap < 1:
            raise ValueError(f"num_turns and menu_cap must be >= 1, got {num_turns}, {menu_cap}")
        self.game_id = game_id
        self.resources = tuple(resources)
        self.num_turns = num_turns
        self.menu_cap = menu_cap
        # A subclass-free way to vary the setup: absent holdings/values are drawn (v2).
        self.holdings = [dict(h) for h in holdings] if holdings else self._draw_holdings()
        self.values = [dict(v) for v in values] if values else self._draw_values()
        self.initial_value = tuple(self.inventory_value(seat) for seat in (0, 1))
        self._start_holdings = tuple(tuple(sorted(h.items())) for h in self.holdings)
        self.pending: tuple[Seat, Offer] | None = None
        for seat in (0, 1):
            self._tell(seat, self._rules(seat))
        self._tell(0, self._status(0))

    # ---- setup -------------------------------------------------------------------
    def _draw_holdings(self) -> list[dict[str, int]]:
        return [{r: self.rng.randint(5, 25) for r in self.resources} for _ in (0, 1)]

    def _draw_values(self) -> list[dict[str, int]]:
        drawn: list[dict[str, int]] = []
        for _ in (0, 1):
            seat_values = {}
            for r in self.resources:
                base = V2_BASE_VALUES[r]
                spread = int(0.2 * base)
                seat_values[r] = self.rng.randint(max(base - spread, 5), min(base + spread, 40))
            drawn.append(seat_values)
        return drawn

    # ---- rules hooks -------------------------------------------------------------
    def _current_player(self) -> Seat:
        return len(self.move_history) % 2

    def _legal_actions(self) -> list[Move]:
        seat = self._current_player()
        moves: list[Move] = []
        if self._offer_to(seat) is not None:
            if self._can_accept(seat):
                moves.append(ACCEPT)
            moves.append(DENY)
        for give in self.resources:
            for give_qty in range(1, min(self.holdings[seat][give], self.menu_cap) + 1):
                for want in self.resources:
                    if want == give:
                        continue
                    for want_qty in range(1, self.menu_cap + 1):
                        offer = Offer(give=((give, give_qty),), receive=((want, want_qty),))
                        moves.append(format_offer(offer))
        return moves

    def parse_action(self, text: str) -> Move | None:
        wanted = normalize_move_text(text)
        seat = self._current_player()
        if wanted == normalize_move_text(ACCEPT):
            return ACCEPT if self._offer_to(seat) is not None and self._can_accept(seat) else None
        if wanted == normalize_move_text(DENY):
            return DENY if self._offer_to(seat) is not None else None
        offer = parse_offer(text, self.resources)
        if offer is None or {r for r, _ in offer.give} & {r for r, _ in offer.receive}:
            return None
        return format_offer(offer)

    def _apply(self, move: Move) -> None:
        seat, _ = self.move_history[-1]
        other = 1 - seat
        self._broadcast(move, sender=f"Player {seat}")
        pending, self.pending = self.pending, None
        if move == ACCEPT:
            assert pending is not None  # parse_action only admits Accept with an offer open
            self._execute(pending[0], seat, pending[1])
        elif move == DENY:
            self._broadcast(f"Player {seat} denied the offer.")
        else:
            offer = parse_offer(move, self.resources)
            assert offer is not None  # canonical offers always re-parse
            if pending is not None:
                self._broadcast(
                    f"Player {seat} made a counter-offer; Player {other}'s offer is off."
                )
            self.pending = (seat, offer)
            self._broadcast(
                f"Player {seat} offers to give {format_items(offer.give)} to Player {other} "
                f"in exchange for {format_items(offer.receive)}."
            )
        if self._game_over():
            self._broadcast(self._result_text())
        else:
            self._tell(other, self._status(other))

    def _game_over(self) -> bool:
        return len(self.move_history) >= self.num_turns

    def _returns(self) -> tuple[float, float]:
        gain0, gain1 = self.value_change(0), self.value_change(1)
        if gain0 == gain1:
            return (0.0, 0.0)
        return (1.0, -1.0) if gain0 > gain1 else (-1.0, 1.0)

    def private_info(self, seat: Seat) -> tuple[object, ...]:
        """The seat's own values, plus the starting inventories: public, but drawn by
        chance in v2, so two seeds with equal `private_info` tell the seat the same."""
        values = tuple((r, self.values[seat][r]) for r in self.resources)
        return (values, self._start_holdings)

    # ---- helpers -----------------------------------------------------------------
    def inventory_value(self, seat: Seat) -> int:
        """Value of `seat`'s current holdings by `seat`'s own values."""
        return sum(self.holdings[seat][r] * self.values[seat][r] for r in self.resources)

    def value_change(self, seat: Seat) -> int:
        return self.inventory_value(seat) - self.initial_value[seat]

    def _offer_to(self, seat: Seat) -> Offer | None:
        if self.pending is None or self.pending[0] == seat:
            return None
        return self.pending[1]

    def _holds(self, seat: Seat, items: Sequence[Item]) -> bool:
        return all(self.holdings[seat][r] >= q for r, q in items)

    def _can_accept(self, seat: Seat) -> bool:
        offer = self._offer_to(seat)
        return offer is not None and self._holds(seat, offer.receive)

    def _execute(self, proposer: Seat, acceptor: Seat, offer: Offer) -> None:
        if not self._holds(proposer, offer.give):
            self._broadcast(
                f"Player {acceptor} accepted, but Player {proposer} no longer holds "
                f"{format_items(offer.give)}; the trade is cancelled."
            )
            return
        for r, q in offer.give:
            self.holdings[proposer][r] -= q
            self.holdings[acceptor][r] += q
        for r, q in offer.receive:
            self.holdings[acceptor][r] -= q
            self.holdings[proposer][r] += q
        self._broadcast(
            f"Player {acceptor} accepted the trade: Player {proposer} gave "
            f"{format_items(offer.give)} and received {format_items(offer.receive)}."
        )

    def _inventory_text(self, seat: Seat) -> str:
        return ", ".join(f"{self.holdings[seat][r]} {r}" for r in self.resources)

    def _rules(self, seat: Seat) -> str:
        rows = "\n".join(
            f"\t+ [{r}]  Qty: {self.holdings[seat][r]}  Value: {self.values[seat][r]}"
            for r in self.resources
        )
        example = format_offer(Offer(((self.resources[0], 2),), ((self.resources[-1], 1),)))
        return (
            f"You are Player {seat} in the Negotiation Game.\n"
            "You have some resources, and your task is to trade such that the total value of "
            "your resources increases.\n"
            f"The resources and associated values you currently have are:\n{rows}\n"
            f"Your opponent starts with: {self._inventory_text(1 - seat)} "
            "(how much it values them is private).\n"
            "On your turn, make exactly one of these moves:\n"
            f"  - '{example}': [Offer: resources you give -> resources you ask for]\n"
            "  - '[Accept]': accept the offer your opponent just made to you.\n"
            "  - '[Deny]': deny it (a counter-offer also denies it).\n"
            "An offer is open for one move only. A trade happens only if both players hold "
            "the resources.\n"
            f"The game lasts for {self.num_turns} turns in total. The player whose inventory "
            "value (by their own values) increased more wins; equal increases are a draw."
        )

    def _status(self, seat: Seat) -> str:
        turn = len(self.move_history) + 1
        offer = self._offer_to(seat)
        moves = [ACCEPT] if offer is not None and self._can_accept(seat) else []
        moves += [DENY] if offer is not None else []
        moves.append("[Offer: <items you give> -> <items you ask for>]")
        pending = f"\nOpen offer to you: {format_offer(offer)}" if offer else ""
        return (
            f"Turn {turn} of {self.num_turns}. Your inventory: {self._inventory_text(seat)} "
            f"(value {self.inventory_value(seat)}, change {self.value_change(seat):+d}). "
            f"Opponent inventory: {self._inventory_text(1 - seat)}.{pending}\n"
            "Available Moves: " + ", ".join(f"'{m}'" for m in moves)
        )

    def _result_text(self) -> str:
        gains = (
            f"Player 0 change {self.value_change(0):+d}, Player 1 change {self.value_change(1):+d}"
        )
        winner = self.winner()
        if winner is None:
            return f"The game is over. {gains}: a draw."
        return f"The game is over. {gains}: Player {winner} wins."


def make_v1(
    seed: int = 0, num_turns: int = 10, menu_cap: int = 5, max_turns: int | None = None
) -> NegotiationState:
    """SimpleNegotiation-v1: 10 Wood and 10 Gold each; p0 values Wood 5 / Gold 15, p1 the reverse."""
    return NegotiationState(
        seed,
        game_id="SimpleNegotiation-v1",
        resources=V1_RESOURCES,
        holdings=({"Wood": 10, "Gold": 10}, {"Wood": 10, "Gold": 10}),
        values=V1_VALUES,
        num_turns=num_turns,
        menu_cap=menu_cap,
        max_turns=max_turns,
    )


def make_v2(
    seed: int = 0, num_turns: int = 10, menu_cap: int = 3, max_turns: int | None = None
) -> NegotiationState:
    """SimpleNegotiation-v2: five resources, quantities and values drawn from the seed."""
    return NegotiationState(
        seed,
        game_id="SimpleNegotiation-v2",
        resources=tuple(V2_BASE_VALUES),
        num_turns=num_turns,
        menu_cap=menu_cap,
        max_turns=max_turns,
    )


register("SimpleNegotiation-v1", make_v1)
register("SimpleNegotiation-v2", make_v2)
