"""Leduc Hold'em at each of OpenSpiel's information states, in our moves.

OpenSpiel's `leduc_poker` names its 936 information states by strings that hold the
seat's card (one of six), the public card once dealt, and each round's actions (0 fold,
1 call or check, 2 raise or bet). `leduc_info_states()` walks its game tree once and
gives, for every such state, a builder of our `LeducPoker-v0` state at which that seat
sees exactly what the string says (the opponent's card, which the seat cannot see, is
the first one the walk dealt). A policy over our states then becomes an OpenSpiel table
(`leduc_exploitability`), and a language model's Leduc exploitability is exact.

Several OpenSpiel states share one situation as our prompts show it (two suits of a
rank look alike): `leduc_exploitability` asks `dists` once per distinct situation
(`LeducPoker.info_key`), 288 of them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from spiral.analysis.exploitability import INSTALL_HINT, checked_distribution, policy_report
from spiral.analysis.exploitability import tabular_policy as _tabular_policy
from spiral.games.leduc_poker import BET, CALL, CHECK, FOLD, RAISE, LeducPoker
from spiral.types import Move, Seat

LEDUC_GAME_ID = "LeducPoker-v0"
OPENSPIEL_NAME = "leduc_poker"
# OpenSpiel's action names -> our moves, keyed by whether the seat faces a bet.
MOVES: dict[bool, dict[str, Move]] = {
    False: {"Call": CHECK, "Raise": BET},
    True: {"Fold": FOLD, "Call": CALL, "Raise": RAISE},
}

DistFn = Callable[[Sequence[tuple[LeducPoker, Seat]]], list[dict[str, float]]]


def _build(cards: tuple[int, int, int], actions: tuple[int, ...], seat: Seat) -> LeducPoker:
    state = LeducPoker(cards=cards)
    for action in actions:
        facing = state.legal_actions()[0] == FOLD
        names = {0: "Fold", 1: "Call", 2: "Raise"}
        state.apply_action(MOVES[facing][names[action]])
    if state.current_player() != seat:
        raise RuntimeError(
            f"{LEDUC_GAME_ID} disagrees with OpenSpiel leduc_poker after {actions}: seat "
            f"{state.current_player()} to act, not {seat}; fix the game or this mapping"
        )
    return state


@functools.cache
def leduc_info_states() -> list[tuple[str, Seat, Callable[[], LeducPoker]]]:
    """Every OpenSpiel `leduc_poker` information state as (its string, the seat to act, a
    builder of our state where that seat sees it)."""
    try:
        import pyspiel
    except ImportError as err:
        raise ImportError(f"Leduc exploitability needs OpenSpiel: {INSTALL_HINT}") from err
    game = pyspiel.load_game(OPENSPIEL_NAME)
    found: dict[str, tuple[Seat, Callable[[], LeducPoker]]] = {}

    def walk(state: Any, cards: list[int], actions: list[int]) -> None:
        if state.is_terminal():
            return
        if state.is_chance_node():
            for card, _ in state.chance_outcomes():
                walk(state.child(card), [*cards, card], actions)
            return
        seat = state.current_player()
        key = state.information_state_string(seat)
        if key not in found:
            public = cards[2] if len(cards) == 3 else min(set(range(6)) - set(cards))
            deal = (cards[0], cards[1], public)
            found[key] = (seat, functools.partial(_build, deal, tuple(actions), seat))
        for action in state.legal_actions():
            walk(state.child(action), cards, [*actions, action])

    walk(game.new_initial_state(), [], [])
    return [(key, seat, build) for key, (seat, build) in found.items()]


def leduc_exploitability(dists: DistFn) -> dict[str, Any]:
    """Exact Leduc numbers of a policy over our states: `dists(positions)` gives the move
    distribution at each (state, seat to act), asked once per distinct situation. The
    report has OpenSpiel's NashConv and exploitability, each seat's self-play and
    best-response values, and the distributions by situation."""
    states = leduc_info_states()
    by_key = {key: (seat, build) for key, seat, build in states}
    distinct: dict[tuple[object, ...], LeducPoker] = {}
    key_of: dict[str, tuple[object, ...]] = {}
    for key, seat, build in states:
        state = build()
        situation = (seat, *state.info_key(seat))
        key_of[key] = situation
        distinct.setdefault(situation, state)
    situations = list(distinct)
    found = dists([(distinct[s], int(s[0])) for s in situations])  # type: ignore[call-overload]
    table = dict(zip(situations, found, strict=True))

    def policy_fn(key: str, seat: Seat, legal: list[str]) -> dict[str, float]:
        if by_key[key][0] != seat:
            raise ValueError(f"{key!r} is seat {by_key[key][0]}'s decision, not seat {seat}'s")
        moves = MOVES["Fold" in legal]
        ours = [moves[name] for name in legal]
        probs = checked_distribution(table[key_of[key]], ours, f"{LEDUC_GAME_ID} {key!r}")
        return dict(zip(legal, probs, strict=True))

    report: dict[str, Any] = dict(
        policy_report(OPENSPIEL_NAME, _tabular_policy(OPENSPIEL_NAME, policy_fn))
    )
    report["situations"] = len(situations)
    report["distributions"] = {repr(s): d for s, d in table.items()}
    return report


def uniform_dists(positions: Sequence[tuple[LeducPoker, Seat]]) -> list[dict[str, float]]:
    """Every legal move equally likely (the scale's far end)."""
    return [dict.fromkeys(s.legal_actions(), 1.0 / len(s.legal_actions())) for s, _ in positions]
