"""Offer parser: the original's 14 valid / 12 malformed / 7 non-offer cases, as assertions,
plus property tests (never raises, format -> parse round-trips)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spiral.games.offers import Offer, format_offer, parse_offer

FIVE = ("Wheat", "Wood", "Sheep", "Brick", "Gold")

VALID = [
    # single items
    ("[Offer: 2 Wood -> 1 Gold]", (("Wood", 2),), (("Gold", 1),)),
    ("[Offer: 1 Wheat -> 3 Sheep]", (("Wheat", 1),), (("Sheep", 3),)),
    # space-separated lists
    ("[Offer: 1 Wood 2 Brick -> 1 Gold]", (("Wood", 1), ("Brick", 2)), (("Gold", 1),)),
    # '+' separators
    (
        "[Offer: 1 Wood + 2 Brick -> 3 Sheep + 1 Gold]",
        (("Wood", 1), ("Brick", 2)),
        (("Sheep", 3), ("Gold", 1)),
    ),
    # comma separators
    ("[Offer: 3 Wheat, 1 Sheep -> 2 Brick]", (("Wheat", 3), ("Sheep", 1)), (("Brick", 2),)),
    # 'and' separators
    (
        "[Offer: 2 Wood and 1 Sheep -> 1 Gold and 1 Wheat]",
        (("Wood", 2), ("Sheep", 1)),
        (("Wheat", 1), ("Gold", 1)),
    ),
    # mixed separators
    (
        "[Offer: 1 Wheat, 2 Wood + 3 Sheep and 4 Brick -> 1 Gold]",
        (("Wheat", 1), ("Wood", 2), ("Sheep", 3), ("Brick", 4)),
        (("Gold", 1),),
    ),
    # lowercase
    ("[offer: 2 wood -> 1 gold]", (("Wood", 2),), (("Gold", 1),)),
    # extra whitespace
    ("  [Offer:   2   Wood   ->   1  Gold  ]  ", (("Wood", 2),), (("Gold", 1),)),
    # large quantities
    ("[Offer: 1000 Wheat -> 250 Gold]", (("Wheat", 1000),), (("Gold", 250),)),
    # plural aliases, mixed and lowercase
    ("[Offer: 2 Woods -> 3 Golds]", (("Wood", 2),), (("Gold", 3),)),
    ("[Offer: 2 bricks + 1 Wheats -> 1 golds]", (("Wheat", 1), ("Brick", 2)), (("Gold", 1),)),
    # LaTeX arrows
    ("[Offer: 1 Sheep \\rightarrow 1 Brick]", (("Sheep", 1),), (("Brick", 1),)),
    ("[Offer: 1 Sheep $\\to$ 2 Wood]", (("Sheep", 1),), (("Wood", 2),)),
]

MALFORMED = [
    "[Offer: 2 Wood 1 Gold]",  # missing arrow
    "[Offer: 2 Wood -> 1 Gold -> 1 Brick]",  # two arrows
    "[Offer: -> 1 Gold]",  # empty side
    "[Offer: two Wood -> 1 Gold]",  # non-numeric quantity
    "[Offer: Wood -> 1 Gold]",  # missing quantity
    "[Offer: 2 -> 1 Gold]",  # missing name
    "[Offer:]",
    "[Offer: 2 Wood -> 1 Gold 3]",  # trailing number
    "[Offer: 0 Wood -> 1 Gold]",  # zero
    "[Offer: -2 Wood -> 1 Gold]",  # negative
    "[Offer: 2 Diamond -> 1 Gold]",  # unknown resource
    "[Offer: 2 Woodz -> 1 Gold]",  # unknown plural-like resource
]

NOT_OFFERS = [
    "Offer: 2 Wood -> 1 Gold",  # no brackets
    "I offer 2 Wood for 1 Gold",  # legacy sentence without brackets
    "",
    "   \n\t",
    "[]",
    "[Offer: 2 Wood -> 1 Gold",  # unclosed bracket
    "[Accept]",
]


@pytest.mark.parametrize(("text", "give", "receive"), VALID)
def test_valid_offers_parse_to_expected_items(text: str, give: tuple, receive: tuple) -> None:
    assert parse_offer(text, FIVE) == Offer(give=give, receive=receive)


@pytest.mark.parametrize("text", MALFORMED + NOT_OFFERS)
def test_malformed_and_non_offers_give_none(text: str) -> None:
    assert parse_offer(text, FIVE) is None


def test_duplicate_items_on_one_side_are_summed_and_canonical_order_is_resource_order() -> None:
    offer = parse_offer("[Offer: 1 Gold + 2 Wood and 1 Gold -> 1 Wheat]", FIVE)
    assert offer == Offer(give=(("Wood", 2), ("Gold", 2)), receive=(("Wheat", 1),))
    assert format_offer(offer) == "[Offer: 2 Wood, 2 Gold -> 1 Wheat]"


def test_resources_outside_the_game_are_unknown() -> None:
    assert parse_offer("[Offer: 1 Sheep -> 1 Gold]", ("Wood", "Gold")) is None
    assert parse_offer("[Offer: 1 Wood -> 1 Gold]", ("Wood", "Gold")) is not None


@given(st.text(max_size=80))
def test_parser_never_raises_on_arbitrary_text(text: str) -> None:
    result = parse_offer(text, FIVE)
    assert result is None or isinstance(result, Offer)


@given(st.text(alphabet="[]Offer:0123456789 ,+-><andWoodGldSheps$\\to", max_size=60))
def test_parser_never_raises_on_offer_like_text(text: str) -> None:
    result = parse_offer(text, FIVE)
    if result is not None:
        assert result.give and result.receive
        assert all(q > 0 for _, q in result.give + result.receive)


_sides = st.dictionaries(st.sampled_from(FIVE), st.integers(1, 10**6), min_size=1)


@given(_sides, _sides)
def test_format_then_parse_round_trips(give: dict[str, int], receive: dict[str, int]) -> None:
    offer = Offer(
        give=tuple((r, give[r]) for r in FIVE if r in give),
        receive=tuple((r, receive[r]) for r in FIVE if r in receive),
    )
    text = format_offer(offer)
    assert parse_offer(text, FIVE) == offer
    assert format_offer(parse_offer(text.lower(), FIVE) or offer) == text
