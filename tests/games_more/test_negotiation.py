"""SimpleNegotiation-v1/v2: trades and scores worked by hand, offer legality, private values."""

from __future__ import annotations

import random

import pytest

from spiral.games import IllegalMoveError, make
from spiral.games.negotiation import ACCEPT, DENY, V2_BASE_VALUES, NegotiationState


def _v1(**params: int) -> NegotiationState:
    state = make("SimpleNegotiation-v1", seed=0, **params)
    assert isinstance(state, NegotiationState)
    return state


def test_v1_setup_and_opening_menu() -> None:
    state = _v1()
    assert state.holdings == [{"Wood": 10, "Gold": 10}, {"Wood": 10, "Gold": 10}]
    assert state.inventory_value(0) == 10 * 5 + 10 * 15 == 200
    assert state.inventory_value(1) == 10 * 15 + 10 * 5 == 200
    legal = state.legal_actions()
    # No pending offer: no Accept/Deny; 5 x 5 Wood->Gold offers and 5 x 5 Gold->Wood offers.
    assert ACCEPT not in legal and DENY not in legal
    assert len(legal) == 50 and "[Offer: 2 Wood -> 1 Gold]" in legal


def test_v1_accepted_trade_and_winner_by_value_change() -> None:
    state = _v1()
    state.apply_action("[Offer: 2 Wood -> 1 Gold]")  # p0 gives 2 Wood, asks 1 Gold
    assert state.legal_actions()[:2] == [ACCEPT, DENY]
    state.apply_action(ACCEPT)
    assert state.holdings == [{"Wood": 8, "Gold": 11}, {"Wood": 12, "Gold": 9}]
    # p0: 8*5 + 11*15 = 205 (+5); p1: 12*15 + 9*5 = 225 (+25).
    assert (state.value_change(0), state.value_change(1)) == (5, 25)
    for _ in range(4):  # eight more moves: offers that are denied
        state.apply_action("[Offer: 1 Gold -> 5 Wood]")
        state.apply_action(DENY)
    assert state.is_terminal() and not state.truncated()
    assert len(state.move_history) == 10
    assert state.returns() == (-1.0, 1.0)
    assert "Player 1 wins" in state.observation(0)


def test_v1_no_trade_is_a_draw() -> None:
    state = _v1()
    for _ in range(5):
        state.apply_action("[Offer: 5 Wood -> 5 Gold]")
        state.apply_action(DENY)
    assert state.is_terminal() and state.returns() == (0.0, 0.0) and not state.truncated()


def test_accept_and_deny_need_an_offer_addressed_to_you() -> None:
    state = _v1()
    for move in (ACCEPT, DENY):
        assert state.parse_action(move) is None
        with pytest.raises(IllegalMoveError):
            state.apply_action(move)
    state.apply_action("[Offer: 1 Wood -> 1 Gold]")
    state.apply_action(DENY)
    # The offer is gone after one move: nothing is pending for p0 now.
    assert ACCEPT not in state.legal_actions() and DENY not in state.legal_actions()


def test_acceptor_without_the_goods_cannot_accept() -> None:
    state = _v1()
    state.apply_action("[Offer: 1 Wood -> 11 Gold]")  # p1 holds only 10 Gold
    assert ACCEPT not in state.legal_actions() and DENY in state.legal_actions()
    with pytest.raises(IllegalMoveError):
        state.apply_action(ACCEPT)


def test_proposer_without_the_goods_cancels_without_penalty() -> None:
    state = _v1()
    state.apply_action("[Offer: 11 Wood -> 1 Gold]")  # legal to propose, cannot execute
    state.apply_action(ACCEPT)
    assert state.holdings == [{"Wood": 10, "Gold": 10}, {"Wood": 10, "Gold": 10}]
    assert "cancelled" in state.observation(0) and not state.is_terminal()


def test_counter_offer_denies_the_pending_offer() -> None:
    state = _v1()
    state.apply_action("[Offer: 1 Wood -> 1 Gold]")
    state.apply_action("[Offer: 3 Wood -> 1 Gold]")  # p1 counters
    assert state.pending is not None and state.pending[0] == 1
    state.apply_action(ACCEPT)  # p0 accepts p1's counter-offer, not its own
    assert state.holdings == [{"Wood": 13, "Gold": 9}, {"Wood": 7, "Gold": 11}]


def test_parse_action_accepts_any_well_formed_offer_canonically() -> None:
    state = _v1()
    assert state.parse_action("[offer: 7 woods \\to 2 golds]") == "[Offer: 7 Wood -> 2 Gold]"
    assert state.parse_action("[Offer: 12 Gold -> 9 Wood]") == "[Offer: 12 Gold -> 9 Wood]"
    assert state.parse_action("[Offer: 1 Wood + 1 Gold -> 3 Gold]") is None  # Gold both sides
    assert state.parse_action("[Offer: 1 Sheep -> 1 Gold]") is None  # not a v1 resource
    assert state.parse_action("I accept") is None


def test_values_are_private() -> None:
    state = _v1()
    assert state.private_info(0)[0] == (("Wood", 5), ("Gold", 15))
    assert state.private_info(1)[0] == (("Wood", 15), ("Gold", 5))
    assert "[Wood]  Qty: 10  Value: 5" in state.observation(0)
    assert "[Wood]  Qty: 10  Value: 15" not in state.observation(0)
    # Same holdings, different values for seat 1: seat 0 is told exactly the same.
    kwargs = {"game_id": "x", "resources": ("Wood", "Gold"), "holdings": state.holdings}
    a = NegotiationState(0, values=state.values, **kwargs)  # type: ignore[arg-type]
    b = NegotiationState(0, values=[state.values[0], {"Wood": 1, "Gold": 99}], **kwargs)  # type: ignore[arg-type]
    for move in ("[Offer: 2 Wood -> 1 Gold]", ACCEPT, "[Offer: 1 Gold -> 1 Wood]"):
        a.apply_action(move)
        b.apply_action(move)
        assert a.observation(0) == b.observation(0)
    assert a.observation(1) != b.observation(1)


def test_v2_setup_is_seeded_and_within_the_original_ranges() -> None:
    seen_values = set()
    for seed in range(40):
        state = make("SimpleNegotiation-v2", seed=seed)
        again = make("SimpleNegotiation-v2", seed=seed)
        assert isinstance(state, NegotiationState) and isinstance(again, NegotiationState)
        assert (state.holdings, state.values) == (again.holdings, again.values)
        for seat in (0, 1):
            for resource, base in V2_BASE_VALUES.items():
                assert 5 <= state.holdings[seat][resource] <= 25
                low, high = max(base - int(0.2 * base), 5), min(base + int(0.2 * base), 40)
                assert low <= state.values[seat][resource] <= high
        seen_values.add(tuple(sorted(state.values[0].items())))
    assert len(seen_values) > 30  # the seed really varies the setup
    # Wheat 5 -> [5, 6] (the floor of 5 binds); Gold 40 -> [32, 40] (the cap binds).
    wheat = {make("SimpleNegotiation-v2", seed=s).values[0]["Wheat"] for s in range(60)}  # type: ignore[attr-defined]
    assert wheat == {5, 6}


def test_v2_multi_item_offers_trade_all_items() -> None:
    state = make("SimpleNegotiation-v2", seed=1)
    assert isinstance(state, NegotiationState)
    before = [dict(h) for h in state.holdings]
    state.apply_action("[Offer: 1 Wheat and 2 Sheep -> 1 Gold + 1 Brick]")
    state.apply_action(ACCEPT)
    assert state.holdings[0]["Wheat"] == before[0]["Wheat"] - 1
    assert state.holdings[0]["Sheep"] == before[0]["Sheep"] - 2
    assert state.holdings[0]["Gold"] == before[0]["Gold"] + 1
    assert state.holdings[1]["Brick"] == before[1]["Brick"] - 1
    assert sum(state.holdings[0].values()) + sum(state.holdings[1].values()) == sum(
        sum(h.values()) for h in before
    )


@pytest.mark.parametrize("game_id", ["SimpleNegotiation-v1", "SimpleNegotiation-v2"])
def test_random_games_end_after_ten_turns_zero_sum(game_id: str) -> None:
    outcomes = set()
    for seed in range(40):
        state = make(game_id, seed=seed)
        rng = random.Random(seed)
        while not state.is_terminal():
            legal = state.legal_actions()
            # Accept half the time it is offered, so trades happen.
            move = ACCEPT if ACCEPT in legal and rng.random() < 0.5 else rng.choice(legal)
            state.apply_action(move)
        assert len(state.move_history) == 10 and not state.truncated()
        r0, r1 = state.returns()
        assert r0 == -r1
        outcomes.add(r0)
    assert len(outcomes) >= 2
