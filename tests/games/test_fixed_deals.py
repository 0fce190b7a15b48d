"""A fixed deal (`cards=`) is whole numbers, all different, in the deck; anything else is
refused when the game is made, not later in the middle of a hand."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spiral import games

GAMES = {"KuhnPokerSingle-v0": (2, 3), "LeducPoker-v0": (3, 6)}
values = st.one_of(
    st.integers(-2, 8), st.floats(-2, 8), st.booleans(), st.text(max_size=2), st.none()
)
# Anything at all, and lists of different small ranks, which are often a valid deal.
deals = st.one_of(
    st.lists(values, max_size=4), st.lists(st.integers(0, 5), min_size=2, max_size=3, unique=True)
)


@settings(max_examples=300, deadline=None)
@given(game=st.sampled_from(sorted(GAMES)), cards=deals, as_tuple=st.booleans())
def test_a_deal_is_played_through_or_refused_at_once(
    game: str, cards: list, as_tuple: bool
) -> None:
    size, deck = GAMES[game]
    valid = (
        len(cards) == size
        and all(type(c) is int and 0 <= c < deck for c in cards)
        and len(set(cards)) == size
    )
    deal = tuple(cards) if as_tuple else cards
    if not valid:
        with pytest.raises(ValueError, match="cards must be"):
            games.make(game, cards=deal)
        return
    state = games.make(game, cards=deal)
    while not state.is_terminal():  # the hand plays to its end with the deal it was given
        state.apply_action(state.legal_actions()[0])
    assert tuple(state.cards) == tuple(cards)  # type: ignore[attr-defined]


def test_every_deal_of_the_list_is_a_valid_fixed_deal() -> None:
    for game, (size, deck) in GAMES.items():
        listed = [tuple(o["cards"]) for o in games.chance_outcomes(game) or ()]
        assert listed == list(itertools.permutations(range(deck), size))
        for deal in listed:
            assert games.make(game, cards=deal).cards == deal  # type: ignore[attr-defined]
