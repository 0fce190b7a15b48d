"""The report's Kuhn strategy table: the policy's P(bet or call) at each of the 12
information states, at its evaluations, beside what Nash play allows there.

Rows are the decisions in the order a hand reaches them (the opener's first move, the
responder after a check and facing a bet, the opener after check-bet); columns are the
range of the whole Nash family (`spiral.games.kuhn_equilibrium`), then the evaluations
(the first, a few between, the last, and the averaged weights at the last where the run
keeps them). A cell within `TOLERANCE` of the Nash range is marked as such, so a reader
sees at a glance which decisions the policy has learned and which it has not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spiral.games.kuhn_equilibrium import CARDS, nash_bet_range
from spiral.report.html_parts import table

GAME = "KuhnPokerSingle-v0"
TOLERANCE = 0.05
MAX_COLUMNS = 6  # evaluations shown (the first and the last always)
DECISIONS = (
    ("", "opener, first move: bet?"),
    ("p", "responder after a check: bet?"),
    ("b", "responder facing a bet: call?"),
    ("pb", "opener after check, bet: call?"),
)


def _key(state: str, averaged: bool = False) -> str:
    return f"eval/{GAME}/{'averaged/' if averaged else ''}p_bet_t1/{state}"


def _spread(rows: Sequence[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    if len(rows) <= limit:
        return list(rows)
    picks = {round(i * (len(rows) - 1) / (limit - 1)) for i in range(limit)}
    return [rows[i] for i in sorted(picks)]


def _cell(value: Any, low: float, high: float) -> Any:
    if not isinstance(value, int | float):
        return "-"
    inside = low - TOLERANCE <= value <= high + TOLERANCE
    return (f"{value:.2f}", "ok" if inside else "bad")


def kuhn_strategy_section(rows: Sequence[dict[str, Any]]) -> str:
    """The table, or "" when the run logged no Kuhn strategy."""
    logged = [r for r in rows if _key("J") in r]
    if not logged:
        return ""
    shown = _spread(logged, MAX_COLUMNS)
    averaged = logged[-1] if _key("J", averaged=True) in logged[-1] else None
    header = ["decision", "state", "Nash family", *(f"step {r['step']}" for r in shown)]
    if averaged is not None:
        header.append(f"averaged, step {averaged['step']}")
    body = []
    for history, label in DECISIONS:
        for card in CARDS:
            state = card + history
            low, high = nash_bet_range(state)
            nash = f"{low:.2f}" if low == high else f"{low:.2f}-{high:.2f}"
            cells = [_cell(r.get(_key(state)), low, high) for r in shown]
            if averaged is not None:
                cells.append(_cell(averaged.get(_key(state, True)), low, high))
            body.append([label, state, nash, *cells])
    exploit = [r.get(f"eval/{GAME}/exploitability_t1") for r in shown]
    if averaged is not None:
        exploit.append(averaged.get(f"eval/{GAME}/averaged/exploitability_t1"))
    shown_e = [f"{e:.3f}" if isinstance(e, int | float) else "-" for e in exploit]
    body.append(["exploitability (0 = Nash)", "", "0", *shown_e])
    return "\n".join(
        [
            "<h2>Kuhn strategy beside Nash play</h2>",
            "<p>P(bet or call) at each information state (the card, then the betting so far: "
            "p = check, b = bet), at temperature 1. The Nash family is every equilibrium's "
            f"value there; <span class='ok'>green</span>: within {TOLERANCE} of it, "
            "<span class='bad'>red</span>: outside.</p>",
            table(header, body, left=2),
        ]
    )
