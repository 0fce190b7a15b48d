"""The average policy of a population, as fictitious play defines it, and its exploitability.

A population (league, snapshot pool, fictitious-play iterates) is a list of tabular
policies pi_1..pi_K with weights w_1..w_K. Its *average policy* is the single behaviour
strategy that plays exactly like "draw member k with probability w_k before the game,
then follow it throughout". That is not the per-state mean of the members' tables: at
an information state I of seat p, a member only counts in proportion to how likely it
is to have steered seat p into I, so

    pi_bar(a|I) = sum_k w_k r_k(I) pi_k(a|I) / sum_k w_k r_k(I)

where r_k(I) is member k's *own* reach of I: the product of member k's probabilities of
seat p's earlier actions on the way to I (chance and opponent actions excluded; with
perfect recall they are the same for every history in I). By Kuhn's theorem pi_bar is
realization-equivalent to the mixture, so against any opponent its value is the
w-weighted mean of the members' values. Where no member reaches I (denominator 0) the
plain w-weighted mean of the tables is used; nothing then depends on that row.

Why the average and not the last iterate: in two-player zero-sum games fictitious play's
average policy converges to a Nash equilibrium, while the last iterate (a best
response, or the newest snapshot of a self-play run) may cycle forever and stay highly
exploitable. A population's strength is therefore measured on its average.

Choices:
- OpenSpiel's `policy_aggregator.PolicyAggregator` builds the same kind of average, but
  it deep-copies reach lists at every history, smooths every action by 1e-40 (so a state
  no member reaches becomes uniform rather than the w-weighted mean) and hands back a
  `PolicyFunction` of dicts. Here the game tree is walked once per game (cached) to find,
  for each information state, the owner's previous own decision; reaches of all members
  then follow with numpy, and the result is a `TabularPolicy` sharing the game's layout.
- OpenSpiel is imported lazily (via `exploitability`), like the rest of this package.
- Inputs are checked, not repaired: members must be TabularPolicies of the same game
  over both seats, their rows distributions over legal actions; weights must be finite,
  non-negative, as many as the members, with a positive sum.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from spiral.analysis.exploitability import _game_and_template, policy_report

if TYPE_CHECKING:  # OpenSpiel stays an optional, lazily imported dependency
    from open_spiel.python.policy import TabularPolicy

_TOLERANCE = 1e-6


@functools.cache
def _own_parents(game_name: str) -> tuple[tuple[int, ...], np.ndarray, np.ndarray]:
    """For each information state of the game's TabularPolicy layout, the owner's previous
    own decision: (states in an order where that decision comes first, its state index
    or -1 at the owner's first decision, the action taken there)."""
    game, template = _game_and_template(game_name)
    parent: dict[int, tuple[int, int]] = {}
    order: list[int] = []

    def walk(state: Any, last: tuple[tuple[int, int], ...]) -> None:
        if state.is_terminal():
            return
        if state.is_chance_node():
            for outcome, _ in state.chance_outcomes():
                walk(state.child(outcome), last)
            return
        seat = state.current_player()
        index = int(template.state_index(state))
        previous = last[seat]
        if index not in parent:
            parent[index] = previous
            order.append(index)
        elif parent[index] != previous:
            raise ValueError(
                f"{game_name}: information state {state.information_state_string(seat)!r} "
                "is reached after different own decisions (imperfect recall); the average "
                "policy is not defined by own reach there"
            )
        for action in state.legal_actions():
            walk(state.child(action), last[:seat] + ((index, action),) + last[seat + 1 :])

    walk(game.new_initial_state(), ((-1, -1),) * game.num_players())
    num_states = len(template.state_lookup)
    if len(order) != num_states:
        raise RuntimeError(
            f"{game_name}: the tree walk met {len(order)} of the {num_states} information "
            "states of OpenSpiel's TabularPolicy; cannot compute reaches"
        )
    parents = np.array([parent[i][0] for i in range(num_states)], dtype=np.int64)
    actions = np.array([parent[i][1] for i in range(num_states)], dtype=np.int64)
    return tuple(order), parents, actions


def _checked_weights(num_members: int, weights: Sequence[float] | None) -> np.ndarray:
    if weights is None:
        return np.full(num_members, 1.0 / num_members)
    values = [float(w) for w in weights]
    if len(values) != num_members:
        raise ValueError(
            f"got {len(values)} weights for {num_members} policies; give one weight per "
            "policy (or none for equal weights)"
        )
    if any(not math.isfinite(w) or w < 0 for w in values):
        raise ValueError(f"weights must be finite and non-negative, got {values}")
    total = math.fsum(values)
    if total <= 0:
        raise ValueError(f"weights must have a positive sum, got {values}")
    return np.array(values) / total


def _checked_tables(game_name: str, tables: Sequence[TabularPolicy]) -> np.ndarray:
    """The members' probability arrays stacked as (member, state, action), validated."""
    if len(tables) == 0:
        raise ValueError("average_policy needs at least one policy")
    game, template = _game_and_template(game_name)
    mask = template.legal_actions_mask.astype(bool)
    stacked = []
    for k, table in enumerate(tables):
        where = f"policy {k}"
        if getattr(table, "game", None) != game:
            raise ValueError(
                f"{where} is for {getattr(table, 'game', None)}, not {game_name}; all "
                "policies must be TabularPolicies of the same game"
            )
        if table.state_lookup != template.state_lookup:
            raise ValueError(
                f"{where} does not cover the information states of both seats of "
                f"{game_name}; build it with TabularPolicy(game) or tabular_policy()"
            )
        probs = np.asarray(table.action_probability_array, dtype=np.float64)
        if probs.shape != mask.shape:
            raise ValueError(f"{where}: probability array of shape {probs.shape}, not {mask.shape}")
        bad = ~np.isfinite(probs) | (probs < 0) | (~mask & (probs != 0))
        bad_rows = bad.any(axis=1) | (np.abs(probs.sum(axis=1) - 1.0) > _TOLERANCE)
        if bad_rows.any():
            row = int(np.flatnonzero(bad_rows)[0])
            key = next(k for k, i in template.state_lookup.items() if i == row)
            raise ValueError(
                f"{where}: row {key!r} is not a distribution over the legal actions: "
                f"{probs[row].tolist()} (legal mask {mask[row].astype(int).tolist()})"
            )
        stacked.append(probs)
    return np.stack(stacked)


def average_policy(
    game_name: str, tables: Sequence[TabularPolicy], weights: Sequence[float] | None = None
) -> TabularPolicy:
    """The behaviour strategy equivalent to playing member k with probability w_k.

    `tables` are OpenSpiel TabularPolicies of `game_name` (as made by `tabular_policy` or
    `TabularPolicy(game)`), `weights` their mixture weights (equal when None; normalised).
    Each seat's rows are the own-reach-weighted mixture of the members' rows (module
    docstring); a fresh TabularPolicy is returned and the inputs are left unchanged.
    """
    probs = _checked_tables(game_name, tables)
    w = _checked_weights(len(tables), weights)
    order, parents, actions = _own_parents(game_name)
    _, template = _game_and_template(game_name)

    reach = np.ones(probs.shape[:2])  # (member, state): member's own reach of the state
    for index in order:
        up = parents[index]
        if up >= 0:
            reach[:, index] = reach[:, up] * probs[:, up, actions[index]]

    weighted_reach = w[:, None] * reach  # (member, state)
    numerator = np.einsum("ks,ksa->sa", weighted_reach, probs)
    denominator = weighted_reach.sum(axis=0)
    mean = np.einsum("k,ksa->sa", w, probs)
    reached = denominator > 0
    average = mean.copy()
    average[reached] = numerator[reached] / denominator[reached, None]

    result = copy.copy(template)
    result.action_probability_array = average
    return result


def average_policy_report(
    game_name: str, tables: Sequence[TabularPolicy], weights: Sequence[float] | None = None
) -> dict[str, float]:
    """`policy_report` of the population's average policy.

    Keys: nash_conv, exploitability, value_selfplay_seat{0,1}, br_value_seat{0,1}.
    """
    return policy_report(game_name, average_policy(game_name, tables, weights))
