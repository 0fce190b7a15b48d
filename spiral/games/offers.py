"""Trade offers for the negotiation games: one tolerant parser and one canonical printer.

An offer reads `[Offer: <give items> -> <receive items>]`: what the proposer hands over,
then what it asks for. The canonical form (what `format_offer` writes and what the games
use as the move string) is `[Offer: 2 Wood, 1 Gold -> 3 Brick]`: items `N Resource`
joined by ", ", in the game's resource order, one item per resource.

The grammar `parse_offer` accepts, decided here once so every caller agrees:
- the whole text (after stripping) is one bracketed token `[Offer ...]`; the keyword is
  case-insensitive and the colon after it optional; no `[` or `]` inside;
- exactly one arrow: `->`, `=>`, `→`, `⟶`, or the LaTeX `\\to`, `\\rightarrow`,
  `\\longrightarrow`, `\\Rightarrow` (math `$` signs are ignored);
- each side is a non-empty list of `N Name` items separated by `,`, `+`, `&`, `and`
  or plain spaces ("1 Wood 2 Brick");
- `N` is a positive decimal integer (no sign, no zero); `Name` matches a resource of
  the game case-insensitively, or its plural with a trailing "s"/"es" ("Woods");
- the same resource named twice on one side is summed ("1 Wood + 2 Wood" = 3 Wood).
Anything else gives None (never an exception): unknown resources, missing or non-numeric
quantities, empty sides, two arrows, a dangling number. Whether an offer is *legal* in a
game (e.g. the same resource on both sides) is the game's call, not the parser's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

Item = tuple[str, int]

_OFFER_RE = re.compile(r"\[\s*offer\s*:?(?P<body>[^\[\]]*)\]", re.IGNORECASE)
_ARROW_RE = re.compile(
    r"->|=>|→|⟶|\\longrightarrow(?![A-Za-z])|\\rightarrow(?![A-Za-z])"
    r"|\\Rightarrow(?![A-Za-z])|\\to(?![A-Za-z])"
)
_SEPARATOR_RE = re.compile(r",|\+|&|\band\b", re.IGNORECASE)
# Guards against absurd integers (and the cost of converting them): no game holds more.
_MAX_QTY_DIGITS = 9


@dataclass(frozen=True)
class Offer:
    """A proposed trade: the proposer gives `give` and receives `receive`.

    Both are tuples of (resource, quantity) in the game's resource order, quantities > 0.
    """

    give: tuple[Item, ...]
    receive: tuple[Item, ...]


def _resource_lookup(resources: Sequence[str]) -> dict[str, str]:
    """Lower-cased name and plural aliases -> canonical resource name."""
    lookup: dict[str, str] = {}
    for name in resources:
        low = name.lower()
        for alias in (low, low + "s", low + "es"):
            lookup.setdefault(alias, name)
    return lookup


def _parse_side(text: str, lookup: dict[str, str], order: Sequence[str]) -> tuple[Item, ...] | None:
    tokens = _SEPARATOR_RE.sub(" ", text).split()
    if not tokens or len(tokens) % 2:
        return None
    totals: dict[str, int] = {}
    for qty_text, name_text in zip(tokens[0::2], tokens[1::2], strict=True):
        if not (qty_text.isascii() and qty_text.isdigit()) or len(qty_text) > _MAX_QTY_DIGITS:
            return None
        qty = int(qty_text)
        name = lookup.get(name_text.lower())
        if qty <= 0 or name is None:
            return None
        totals[name] = totals.get(name, 0) + qty
    return tuple((name, totals[name]) for name in order if name in totals)


def parse_offer(text: str, resources: Sequence[str]) -> Offer | None:
    """The offer `text` denotes over `resources`, or None if it is not a well-formed offer."""
    match = _OFFER_RE.fullmatch(text.strip())
    if match is None:
        return None
    body = match.group("body").replace("$", "")
    sides = _ARROW_RE.split(body)
    if len(sides) != 2:
        return None
    lookup = _resource_lookup(resources)
    give = _parse_side(sides[0], lookup, resources)
    receive = _parse_side(sides[1], lookup, resources)
    if give is None or receive is None:
        return None
    return Offer(give=give, receive=receive)


def format_items(items: Sequence[Item]) -> str:
    """`2 Wood, 1 Gold`: the canonical item list."""
    return ", ".join(f"{qty} {name}" for name, qty in items)


def format_offer(offer: Offer) -> str:
    """The canonical move string, e.g. `[Offer: 2 Wood -> 1 Gold]`."""
    return f"[Offer: {format_items(offer.give)} -> {format_items(offer.receive)}]"
