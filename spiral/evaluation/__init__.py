"""evaluation layer: is it any good? Rates with intervals, exact move distributions and
exact exploitability (docs/architecture.md, "Evaluation").

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
