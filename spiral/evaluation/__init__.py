"""evaluation layer: is it any good? Rates with intervals, exact move distributions and
exact exploitability.

Matches (`match.py`) play every opponent from both seats with seeded games and give
Wilson intervals (`intervals.py`); `model_policy.py` turns a language model into a policy
table (exact move distributions from batched `score` calls), whose game theory lives a
layer lower in `spiral/analysis/`; `mixture.py` scores a mixture of checkpoints; the
league (`league.py`) rates players from their games; `mathbench/` measures reasoning
transfer. The `spiral eval` command is `cli.py`, `run.py`, `inherit.py` (what a
checkpoint's run decides), `outputs.py` (where reports go) and `compare.py` (a run's
checkpoints side by side). Usage and the meaning of every number: docs/evaluation.md.

Import-light on purpose: nothing here imports OpenSpiel or torch at package import;
`exploitability` loads OpenSpiel only when a function needs it.
"""

from spiral.analysis.exploitability import (
    kuhn_exploitability,
    kuhn_info_states,
    kuhn_nash_policy,
    kuhn_policy_from_states,
    kuhn_tabular_policy,
    kuhn_uniform_policy,
    tabular_exploitability,
    tabular_policy,
)
from spiral.analysis.move_distribution import move_distribution, sampled_frequencies
from spiral.evaluation.intervals import Rate, mean_ci, wilson_interval

__all__ = [
    "Rate",
    "kuhn_exploitability",
    "kuhn_info_states",
    "kuhn_nash_policy",
    "kuhn_policy_from_states",
    "kuhn_tabular_policy",
    "kuhn_uniform_policy",
    "mean_ci",
    "move_distribution",
    "sampled_frequencies",
    "tabular_exploitability",
    "tabular_policy",
    "wilson_interval",
]
