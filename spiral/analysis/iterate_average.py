"""The average of a run's own policies over its evaluations, read from its metrics.

Self-play's last iterate can cycle around an equilibrium, and where a run stops on that
cycle decides its final exploitability; fictitious play's guarantee is about the
*average* strategy. Every Kuhn evaluation logs the live policy's strategy table
(`eval/KuhnPokerSingle-v0/p_bet_t1/<state>`: P(bet or call) at the 12 information
states), so the average of the policies a run passed through costs nothing to train:
it is computed from `metrics.jsonl` after the fact, as the behaviour strategy that plays
like "pick one of the evaluated policies at random before each hand"
(`average_policy.average_policy`, reach-weighted, not the per-state mean), and its exact
exploitability is measured. Two windows: every evaluation so far (`iterates_average`) and
the second half of them (`iterates_second_half`, which forgets the start of training).

This is the average *policy*, not the averaged *weights* (`weight_ema_decay`,
`eval/<game>/averaged/...`): a model whose weights are averaged need not play the average
of the policies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spiral.analysis.exploitability import (
    KUHN_CARDS,
    KUHN_GAME_ID,
    KuhnPolicyFn,
    kuhn_moves,
    kuhn_tabular_policy,
)

STATES = 12  # single-hand Kuhn: 3 cards x 4 decision points


def logged_tables(rows: Sequence[dict[str, Any]]) -> list[tuple[int, dict[str, float]]]:
    """(step, strategy table) of every evaluation that logged all 12 states, in step
    order; a step logged twice (evaluated again after a resume) counts once, its last."""
    prefix = f"eval/{KUHN_GAME_ID}/p_bet_t1/"
    by_step: dict[int, dict[str, float]] = {}
    for row in rows:
        table = {
            k[len(prefix) :]: float(v)
            for k, v in row.items()
            if k.startswith(prefix) and isinstance(v, (int, float))
        }
        if len(table) == STATES and isinstance(row.get("step"), int):
            by_step[int(row["step"])] = table
    return sorted(by_step.items())


def table_policy(table: dict[str, float]) -> KuhnPolicyFn:
    """A Kuhn policy_fn from a logged table ({"Jpb": P(bet or call), ...})."""

    def policy(info_state: str, seat: int) -> dict[str, float]:
        p = table[KUHN_CARDS[int(info_state[0])] + info_state[1:]]
        passive, aggressive = kuhn_moves(info_state)
        return {passive: 1.0 - p, aggressive: p}

    return policy


def average_report(tables: Sequence[dict[str, float]]) -> dict[str, float]:
    """Exact numbers (nash_conv, exploitability...) of the equal mixture of `tables`."""
    from spiral.analysis.average_policy import average_policy_report

    members = [kuhn_tabular_policy(table_policy(t)) for t in tables]
    return average_policy_report("kuhn_poker", members)


def iterate_average_metrics(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """`eval/<Kuhn>/iterates_average/exploitability_t1` over every logged evaluation and
    `.../iterates_second_half/...` over the later half; {} without logged tables (or
    without the openspiel extra)."""
    return tables_metrics([t for _, t in logged_tables(rows)])


def tables_metrics(tables: Sequence[dict[str, float]]) -> dict[str, float]:
    """`iterate_average_metrics` of tables already read (`logged_tables`)."""
    if not tables:
        return {}
    prefix = f"eval/{KUHN_GAME_ID}"
    try:
        whole = average_report(tables)
        half = average_report(tables[len(tables) // 2 :])
    except ImportError:
        return {}
    return {
        f"{prefix}/iterates_average/exploitability_t1": float(whole["exploitability"]),
        f"{prefix}/iterates_second_half/exploitability_t1": float(half["exploitability"]),
        f"{prefix}/iterates_average/evaluations": float(len(tables)),
    }
