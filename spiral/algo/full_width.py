"""The exact expected update of a small game: every chance outcome and every legal move
expanded with its probability, instead of games sampled from them.

A sampled self-play step estimates, from N games, the policy gradient

    sum over situations I of  reach(I) * sum over moves a of  pi(a|I) * (Q(I, a) - b) * grad log pi(a|I)

where reach(I) is how often a game reaches I (chance and both seats' moves), Q(I, a) the
acting seat's expected return after a at I, and b any baseline (it cancels, since
sum_a pi(a|I) grad log pi(a|I) = 0). Situations that few games reach get few rows and the
noisiest estimate: on Leduc the second betting round, where most of the game's value is.
In a game whose chance outcomes can be listed and whose answers are constrained to the
legal moves, nothing forces sampling: the tree over every deal and every move is small
enough to walk, so reach(I) and Q(I, a) are computed exactly from the policy's own
probabilities, and each situation is trained once, on one row per move with

    weight    = reach(I) * pi(a|I)          (the rows sampling would give it, per game)
    advantage = Q(I, a) - V(I),  V(I) = sum_a pi(a|I) Q(I, a)

so the learner's update (rows weighted by `weight`, normalised by their sum: the
expected number of decisions a game) is the limit of the sampled one as N grows, its
entropy, KL and floor terms included (each position weighted by how often play visits
it).

Here only the game theory, on plain values: `expand` walks a game from its listed deals
into a `GameTree` (decisions keyed by what the acting seat sees: two decisions of one key
are one information state to the policy, which cannot tell them apart), `exact_values`
takes the policy's probabilities per key and returns each key's reach and move values.
The rows' token ids come from the training side (`spiral/train/full_width.py`).

Choices:
- Deals are equally likely (`State.chance_outcomes` lists a game's outcomes so that a
  batch can deal each equally often); the value of a key is the reach-weighted mean over
  the decisions it covers, as a seat that cannot tell them apart meets them.
- A tree is bounded (`max_decisions`) and refused above it with its size, before any
  model work: full width is for games whose whole tree is cheap to score every step.
- A key whose decisions offer different legal moves is refused: the policy's answer
  there could not be one distribution over one set of moves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

from spiral.games.base import State
from spiral.types import Move, Seat


class TreeTooLarge(ValueError):
    """The game's tree over its listed deals exceeds the bound full width expands."""


@dataclass(frozen=True)
class GameTree:
    """Every decision of a game over its listed deals, parents before children.

    Per decision node i: `keys[i]` (what the acting seat sees), `seats[i]`, `moves[i]`
    (legal, in the game's order) and `children[i][a]`: the next decision's index, or
    -1 - t for terminal t, whose returns are `returns[t]`. `roots` are the deals' first
    decisions, each dealt with probability `1 / len(roots)`; `publics[i]` is the moves
    made before node i, which rows of one public state share."""

    keys: tuple[Hashable, ...]
    seats: tuple[Seat, ...]
    moves: tuple[tuple[Move, ...], ...]
    children: tuple[tuple[int, ...], ...]
    returns: tuple[tuple[float, float], ...]
    roots: tuple[int, ...]
    publics: tuple[tuple[Move, ...], ...]

    @property
    def num_decisions(self) -> int:
        return len(self.keys)


@dataclass(frozen=True)
class KeyValues:
    """One information state under a policy: who acts, how often a game reaches it, and
    the acting seat's expected return after each legal move (in `moves` order)."""

    seat: Seat
    moves: tuple[Move, ...]
    reach: float
    q: tuple[float, ...]

    def value(self, probs: Sequence[float]) -> float:
        return math.fsum(p * q for p, q in zip(probs, self.q, strict=True))


def count_decisions(deals: Sequence[State], max_decisions: int) -> int:
    """How many decisions the tree over `deals` holds; `TreeTooLarge` past the bound."""
    count = 0
    stack = [deal.clone() for deal in deals]
    while stack:
        state = stack.pop()
        if state.is_terminal():
            continue
        count += 1
        if count > max_decisions:
            raise TreeTooLarge(_too_large(deals, max_decisions))
        for move in state.legal_actions():
            child = state.clone()
            child.apply_action(move)
            stack.append(child)
    return count


def _too_large(deals: Sequence[State], max_decisions: int) -> str:
    game_id = deals[0].game_id if deals else "the game"
    return (
        f"{game_id} has more than {max_decisions:,} decisions over its "
        f"{len(deals)} listed deal(s): too large to expand every move each step"
    )


def expand(
    deals: Sequence[State],
    key: Callable[[State, Seat], Hashable],
    max_decisions: int,
) -> GameTree:
    """The tree of every decision from each of `deals` (fresh states, one per listed
    chance outcome, no chance left inside), each keyed by `key(state, seat to act)`."""
    if not deals:
        raise ValueError("full width needs at least one deal to expand")
    keys: list[Hashable] = []
    seats: list[Seat] = []
    moves: list[tuple[Move, ...]] = []
    children: list[list[int]] = []
    publics: list[tuple[Move, ...]] = []
    returns: list[tuple[float, float]] = []
    legal_of: dict[Hashable, tuple[Move, ...]] = {}

    def add(state: State, public: tuple[Move, ...]) -> int:
        if state.is_terminal():
            r = state.returns()
            returns.append((float(r[0]), float(r[1])))
            return -len(returns)  # -1 - (len - 1)
        if len(keys) >= max_decisions:
            raise TreeTooLarge(_too_large(deals, max_decisions))
        seat = state.current_player()
        legal = tuple(state.legal_actions())
        k = key(state, seat)
        if legal_of.setdefault(k, legal) != legal:
            raise ValueError(
                f"{state.game_id}: one situation as the policy sees it offers different "
                f"legal moves ({legal_of[k]} and {legal}); its prompt must tell them apart"
            )
        keys.append(k)
        seats.append(seat)
        moves.append(legal)
        publics.append(public)
        children.append([])
        return len(keys) - 1

    roots = [add(deal.clone(), ()) for deal in deals]
    if any(r < 0 for r in roots):
        raise ValueError(f"{deals[0].game_id}: a listed deal is over before anyone moves")
    stack = [(r, deal.clone()) for r, deal in zip(roots, deals, strict=True)]
    while stack:
        node, state = stack.pop()
        for move in moves[node]:
            child = state.clone()
            child.apply_action(move)
            index = add(child, (*publics[node], move))
            children[node].append(index)
            if index >= 0:
                stack.append((index, child))
    return GameTree(
        keys=tuple(keys),
        seats=tuple(seats),
        moves=tuple(moves),
        children=tuple(tuple(c) for c in children),
        returns=tuple(returns),
        roots=tuple(roots),
        publics=tuple(publics),
    )


def exact_values(
    tree: GameTree, policy: Mapping[Hashable, Sequence[float]]
) -> tuple[dict[Hashable, KeyValues], tuple[float, float]]:
    """Each key's reach and move values when `policy` (key -> probabilities of its legal
    moves, in order) plays both seats, and each seat's expected return at the root.

    reach(key) sums, over the decisions it covers, deal probability x both seats' move
    probabilities on the way; q(key, a) is the reach-weighted mean of the acting seat's
    expected return after a (the plain mean where no decision of the key is reached)."""
    n = tree.num_decisions
    probs = [tuple(float(p) for p in policy[k]) for k in tree.keys]
    for i, p in enumerate(probs):
        if len(p) != len(tree.moves[i]):
            raise ValueError(
                f"policy at {tree.keys[i]!r}: {len(p)} probabilities for the legal moves "
                f"{tree.moves[i]}"
            )
    reach = [0.0] * n
    for r in tree.roots:
        reach[r] = 1.0 / len(tree.roots)
    for i in range(n):  # parents come before children
        for a, child in enumerate(tree.children[i]):
            if child >= 0:
                reach[child] = reach[i] * probs[i][a]
    value = [(0.0, 0.0)] * n
    after: list[list[tuple[float, float]]] = [[] for _ in range(n)]
    for i in reversed(range(n)):
        for child in tree.children[i]:
            after[i].append(value[child] if child >= 0 else tree.returns[-1 - child])
        value[i] = (
            math.fsum(p * v[0] for p, v in zip(probs[i], after[i], strict=True)),
            math.fsum(p * v[1] for p, v in zip(probs[i], after[i], strict=True)),
        )
    sums: dict[Hashable, list[float]] = {}
    plain: dict[Hashable, list[float]] = {}
    weight: dict[Hashable, float] = {}
    count: dict[Hashable, int] = {}
    for i in range(n):
        k, seat = tree.keys[i], tree.seats[i]
        own = [v[seat] for v in after[i]]
        acc = sums.setdefault(k, [0.0] * len(own))
        raw = plain.setdefault(k, [0.0] * len(own))
        for a, q in enumerate(own):
            acc[a] += reach[i] * q
            raw[a] += q
        weight[k] = weight.get(k, 0.0) + reach[i]
        count[k] = count.get(k, 0) + 1
    out: dict[Hashable, KeyValues] = {}
    first = {k: i for i, k in reversed(list(enumerate(tree.keys)))}
    for k, i in first.items():
        w = weight[k]
        values = [s / w for s in sums[k]] if w > 0 else [s / count[k] for s in plain[k]]
        out[k] = KeyValues(tree.seats[i], tree.moves[i], w, tuple(values))
    root = (
        math.fsum(value[r][0] for r in tree.roots) / len(tree.roots),
        math.fsum(value[r][1] for r in tree.roots) / len(tree.roots),
    )
    return out, root
