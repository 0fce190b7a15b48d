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
import typing
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from spiral.analysis.exploitability import INSTALL_HINT, checked_distribution, policy_report
from spiral.analysis.exploitability import tabular_policy as _tabular_policy
from spiral.analysis.gains import best_response_gains
from spiral.games.leduc_poker import BET, CALL, CHECK, FOLD, OPENSPIEL_ACTION, RAISE, LeducPoker
from spiral.types import Move, Seat

LEDUC_GAME_ID = "LeducPoker-v0"
OPENSPIEL_NAME = "leduc_poker"
# OpenSpiel's action names -> our moves, keyed by whether the seat faces a bet.
MOVES: dict[bool, dict[str, Move]] = {
    False: {"Call": CHECK, "Raise": BET},
    True: {"Fold": FOLD, "Call": CALL, "Raise": RAISE},
}

DistFn = Callable[[Sequence[tuple[LeducPoker, Seat]]], list[dict[str, float]]]


@functools.cache
def leduc_info_states() -> list[tuple[str, Seat, Callable[[], LeducPoker]]]:
    """Every OpenSpiel `leduc_poker` information state as (its string, the seat to act, a
    builder of our state where that seat sees it: the first of `twin_states` with it)."""
    try:
        import pyspiel
    except ImportError as err:
        raise ImportError(f"Leduc exploitability needs OpenSpiel: {INSTALL_HINT}") from err
    found: dict[str, tuple[Seat, Callable[[], LeducPoker]]] = {}
    for ours, theirs in twin_states(pyspiel.load_game(OPENSPIEL_NAME)):
        seat = ours.current_player()
        found.setdefault(theirs.information_state_string(seat), (seat, ours.clone))  # type: ignore[arg-type]
    return [(key, seat, build) for key, (seat, build) in found.items()]


def twin_states(game: Any) -> Iterator[tuple[LeducPoker, Any]]:
    """Every state of our game where someone moves, beside OpenSpiel's same state in
    `game` (a loaded `leduc_poker`), over all 120 deals: for reading an OpenSpiel policy
    off at our states, or writing one of ours into an OpenSpiel table."""
    for deal in LeducPoker.chance_outcomes() or ():
        cards = typing.cast(tuple[int, int, int], deal["cards"])
        stack = [
            (LeducPoker(cards=cards), game.new_initial_state().child(cards[0]).child(cards[1]))
        ]
        while stack:
            ours, theirs = stack.pop()
            if ours.is_terminal():
                continue
            yield ours, theirs
            for move in ours.legal_actions():
                nxt = typing.cast(LeducPoker, ours.clone())
                nxt.apply_action(move)
                after = theirs.child(OPENSPIEL_ACTION[move])
                if after.is_chance_node():  # the round closed: the deal's public card
                    after = after.child(nxt.cards[2])
                stack.append((nxt, after))


def leduc_exploitability(dists: DistFn) -> dict[str, Any]:
    """Exact Leduc numbers of a policy over our states: `dists(positions)` gives the move
    distribution at each (state, seat to act), asked once per distinct situation. The
    report has OpenSpiel's NashConv and exploitability, each seat's self-play and
    best-response values, what a best responder gains in each seat and betting round
    (`round_gains`), and the distributions by situation."""
    policy, table = leduc_table(dists)
    report: dict[str, Any] = dict(policy_report(OPENSPIEL_NAME, policy))
    report.update(round_gains(policy))
    report["situations"] = len(table)
    report["distributions"] = {repr(s): d for s, d in table.items()}
    return report


def leduc_table(dists: DistFn) -> tuple[Any, dict[tuple[object, ...], dict[str, float]]]:
    """The policy over our states as an OpenSpiel `TabularPolicy` of `leduc_poker`, and its
    distribution per distinct situation (`dists` asked once per situation)."""
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

    return _tabular_policy(OPENSPIEL_NAME, policy_fn), table


def round_gains(policy: Any) -> dict[str, float]:
    """What a best responder gains in each seat and betting round against `policy` (an
    OpenSpiel table of `leduc_poker`), as `br_gain_seat{S}_round{R}`: each seat's two
    rounds sum to its `br_value - value_selfplay` (`analysis/gains.py`)."""
    import pyspiel

    def betting_round(info: str) -> str:
        return "2" if "[Round 2]" in info else "1"

    game = pyspiel.load_game(OPENSPIEL_NAME)
    gains = best_response_gains(game, policy, betting_round)
    return {
        f"br_gain_seat{seat}_round{r}": float(by_round.get(r, 0.0))
        for seat, by_round in gains.items()
        for r in ("1", "2")
    }


def uniform_dists(positions: Sequence[tuple[LeducPoker, Seat]]) -> list[dict[str, float]]:
    """Every legal move equally likely (the scale's far end)."""
    return [dict.fromkeys(s.legal_actions(), 1.0 / len(s.legal_actions())) for s, _ in positions]
