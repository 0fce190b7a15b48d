"""Exact exploitability of a mixture of policies (a run's stored iterates, one drawn per
game: `agents/mixture.py`).

Each member's move distribution at every information state is scored exactly
(`model_policy`), made an OpenSpiel table, and the members' tables are averaged by their
own reach (`analysis/average_policy.py`): the behaviour strategy that plays exactly like
drawing one member before the game and following it. Kuhn and Leduc, whose tables
OpenSpiel holds; other games are refused by `MIXTURE_GAMES`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from spiral.agents.llm_policy import LLMPolicy
from spiral.analysis.exploitability import KUHN_GAME_ID, kuhn_tabular_policy, policy_report
from spiral.analysis.leduc import LEDUC_GAME_ID, OPENSPIEL_NAME, leduc_table, round_gains
from spiral.evaluation.model_policy import model_kuhn_exploitability, model_move_distributions

Progress = Callable[[int, int], None]  # (members done, members in all)


def _kuhn_table(member: LLMPolicy, temperature: float) -> Any:
    dists = model_kuhn_exploitability(member, temperature)["distributions"]
    return kuhn_tabular_policy(lambda info, seat: dists[info])


def _leduc_table(member: LLMPolicy, temperature: float) -> Any:
    def dists(positions: Sequence[tuple[Any, int]]) -> list[dict[str, float]]:
        return model_move_distributions(member, positions, temperature)

    return leduc_table(dists)[0]


# Game id -> (OpenSpiel name, a member's table at a temperature).
MIXTURE_GAMES: dict[str, tuple[str, Callable[[LLMPolicy, float], Any]]] = {
    KUHN_GAME_ID: ("kuhn_poker", _kuhn_table),
    LEDUC_GAME_ID: (OPENSPIEL_NAME, _leduc_table),
}


def mixture_exploitability(
    game_id: str,
    members: Sequence[LLMPolicy],
    temperature: float = 1.0,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """NashConv, exploitability, each seat's self-play and best-response values of the
    equal mixture of `members` (Leduc: also the best responder's gain per seat and round),
    and each member's own exploitability (`member_exploitability`, in order)."""
    from spiral.analysis.average_policy import average_policy

    if game_id not in MIXTURE_GAMES:
        raise ValueError(
            f"the exploitability of a mixture is exact on {', '.join(MIXTURE_GAMES)}, not {game_id}"
        )
    name, table_of = MIXTURE_GAMES[game_id]
    tables = []
    for k, member in enumerate(members):
        tables.append(table_of(member, temperature))
        if progress is not None:
            progress(k + 1, len(members))
    average = average_policy(name, tables)
    report: dict[str, Any] = dict(policy_report(name, average))
    if game_id == LEDUC_GAME_ID:
        report.update(round_gains(average))
    report["member_exploitability"] = [policy_report(name, t)["exploitability"] for t in tables]
    report["members"] = len(members)
    return report
