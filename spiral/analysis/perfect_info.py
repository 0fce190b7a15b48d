"""Exact exploitability of a policy in a small perfect-information game (TicTacToe).

With no chance and nothing hidden, a best response to a fixed policy is a search: at the
responder's turns take the best move, at the policy's turns average over its move
distribution. Positions repeat along different move orders (TicTacToe has 549,946 move
sequences but 5,478 positions), so the tree is walked as a graph keyed by `key(state)`,
which must determine everything that follows: what the policy is shown (its prompt) and
the rest of the game. For TicTacToe with the default observation (the rules and the
current board) the prompt of the seat to move is such a key; full-history prompts make
every move order its own position, which this module refuses past `max_positions`.

Two passes, so a model is asked once for all positions: `game_positions` enumerates the
graph, then `policy_report` takes one distribution per decision position (from one
batched call, e.g. `model_move_distributions`) and computes, in the keys OpenSpiel's
reports use: each seat's self-play value, each seat's best-response value against the
policy in the other seat, NashConv = the sum of the two improvements and exploitability
= NashConv / 2. Checked against OpenSpiel's `exploitability` for the uniform random
policy on tic_tac_toe (0.95983, tests); a never-losing minimax player scores 0.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from spiral.analysis.exploitability import checked_distribution
from spiral.games.base import State
from spiral.types import Move, Seat

MAX_POSITIONS = 20_000
KeyFn = Callable[[State], Hashable]


@dataclass
class Position:
    """A node of the game graph: a state to act in (`seat`, `children` by move) or an end
    (`returns`)."""

    state: State
    seat: Seat | None
    children: dict[Move, Hashable] = field(default_factory=dict)
    returns: tuple[float, float] | None = None


def game_positions(
    root: State, key: KeyFn, max_positions: int = MAX_POSITIONS
) -> dict[Hashable, Position]:
    """Every position reachable from `root`, keyed by `key`, with its moves' successors."""
    positions: dict[Hashable, Position] = {}
    stack = [(root, key(root))]  # each key computed once per edge (a prompt render)
    while stack:
        state, k = stack.pop()
        if k in positions:
            continue
        if len(positions) >= max_positions:
            raise ValueError(
                f"more than {max_positions} positions: too large for an exact best response "
                "here (full-history prompts make every move order a position; use the "
                "latest-state observation)"
            )
        if state.is_terminal():
            positions[k] = Position(state, None, returns=tuple(state.returns()))  # type: ignore[arg-type]
            continue
        node = Position(state, state.current_player())
        positions[k] = node
        for move in state.legal_actions():
            child = state.clone()
            child.apply_action(move)
            node.children[move] = child_key = key(child)
            stack.append((child, child_key))
    return positions


def decisions(positions: dict[Hashable, Position]) -> list[Hashable]:
    """Keys of the positions where someone moves (the policy's table rows), in a fixed order."""
    return [k for k, p in positions.items() if p.seat is not None]


def policy_report(
    positions: dict[Hashable, Position],
    root_key: Hashable,
    table: dict[Hashable, dict[Move, float]],
) -> dict[str, float]:
    """Self-play and best-response values, NashConv and exploitability of the policy whose
    move distribution at each decision position is `table[key]` (two seats, zero-sum)."""
    probs: dict[Hashable, list[tuple[Hashable, float]]] = {}
    for k in decisions(positions):
        node = positions[k]
        moves = list(node.children)
        dist = checked_distribution(table[k], moves, f"position {k!r}")
        probs[k] = [(node.children[m], p) for m, p in zip(moves, dist, strict=True)]

    order = _children_first(positions, root_key)

    def solve(responder: Seat | None) -> dict[Hashable, float]:
        """Seat 0's value everywhere when `responder` best-responds (None: self-play)."""
        value: dict[Hashable, float] = {}
        for k in order:
            node = positions[k]
            if node.returns is not None:
                value[k] = node.returns[0]
            elif node.seat == responder:
                best = max if responder == 0 else min  # seat 1 minimises seat 0's value
                value[k] = best(value[c] for c in node.children.values())
            else:
                value[k] = sum(p * value[c] for c, p in probs[k])
        return value

    selfplay = solve(None)[root_key]
    br0, br1 = solve(0)[root_key], -solve(1)[root_key]
    nash_conv = (br0 - selfplay) + (br1 + selfplay)
    return {
        "nash_conv": nash_conv,
        "exploitability": nash_conv / 2,
        "value_selfplay_seat0": selfplay,
        "value_selfplay_seat1": -selfplay,
        "br_value_seat0": br0,
        "br_value_seat1": br1,
    }


def _children_first(positions: dict[Hashable, Position], root_key: Hashable) -> list[Hashable]:
    """Positions reachable from the root, every child before its parents (iterative DFS)."""
    order: list[Hashable] = []
    done: set[Hashable] = set()
    stack: list[tuple[Hashable, bool]] = [(root_key, False)]
    while stack:
        k, expanded = stack.pop()
        if expanded:
            order.append(k)
            continue
        if k in done:
            continue
        done.add(k)
        stack.append((k, True))
        stack.extend((c, False) for c in positions[k].children.values() if c not in done)
    return order


def exploitability(
    root: State,
    key: KeyFn,
    dists: Callable[[Sequence[tuple[State, Seat]]], list[dict[Move, float]]],
    max_positions: int = MAX_POSITIONS,
) -> dict[str, float]:
    """`policy_report` for the policy `dists` (a batch of (state, seat to move) -> move
    distributions), asked once for every decision position reachable from `root`."""
    positions = game_positions(root, key, max_positions)
    keys = decisions(positions)
    found = dists([(positions[k].state, positions[k].seat) for k in keys])  # type: ignore[misc]
    return policy_report(positions, key(root), dict(zip(keys, found, strict=True)))
