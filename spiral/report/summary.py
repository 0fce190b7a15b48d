"""Before -> after: what a run changed, from its first evaluation to its last.

The headline of a run is how its evaluation moved: exploitability and value against the
Nash player where the game has them, and the rates against each evaluation opponent in
each seat (with their 95% Wilson intervals; a draw or invalid rate that stayed at 0 is
left out, and the loss rate, which the other two rates fix, too). `evaluation_changes` reads them from the
metrics rows (the first and the last row that evaluated); `spiral train` prints them as
text when it ends (`format_before_after`) and `spiral report` opens its page with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# The last part of the eval keys that make the headline.
HEADLINE_MEASURES = (
    "win_rate",
    "draw_rate",
    "invalid_rate",
    "exploitability_t1",
    "value_vs_nash_seat0_t1",
    "value_vs_nash_seat1_t1",
    "exploitability_rollout_t",
    "value_vs_nash_seat0_rollout_t",
    "value_vs_nash_seat1_rollout_t",
)


@dataclass(frozen=True)
class Change:
    """One headline metric at the first and at the last evaluation."""

    key: str  # without the leading "eval/"
    before: float | None  # None: not measured at the first evaluation
    after: float
    interval_before: tuple[float, float] | None = None
    interval_after: tuple[float, float] | None = None

    @property
    def game(self) -> str:
        return self.key.split("/", 1)[0]

    @property
    def measure(self) -> str:
        return self.key.split("/", 1)[-1]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _interval(row: dict[str, Any], key: str) -> tuple[float, float] | None:
    low, high = _number(row.get(f"{key}_low")), _number(row.get(f"{key}_high"))
    return (low, high) if low is not None and high is not None else None


def evaluation_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The metrics rows that carry an evaluation."""
    return [r for r in rows if any(str(k).startswith("eval/") for k in r)]


def evaluation_changes(rows: Sequence[dict[str, Any]]) -> tuple[int, int, list[Change]]:
    """(first eval step, last eval step, the headline changes between them)."""
    evaluated = evaluation_rows(rows)
    if not evaluated:
        return 0, 0, []
    first, last = evaluated[0], evaluated[-1]
    changes = []
    for key in sorted(k for k in last if k.startswith("eval/")):
        after, before = _number(last[key]), _number(first.get(key))
        if after is None or key.rsplit("/", 1)[-1] not in HEADLINE_MEASURES:
            continue
        if key.endswith("_rate") and not after and not before:
            continue  # a draw or invalid rate that stayed at 0 says nothing
        changes.append(
            Change(
                key[len("eval/") :],
                before,
                after,
                _interval(first, key),
                _interval(last, key),
            )
        )
    return int(first.get("step", 0)), int(last.get("step", 0)), changes


def format_before_after(rows: Sequence[dict[str, Any]]) -> str:
    """The text `spiral train` prints at its end: one line per headline metric."""
    start, end, changes = evaluation_changes(rows)
    if not changes:
        return "no evaluation rows (eval_every=0?)"
    lines = [f"evaluation at step {start} -> step {end}:"]
    for change in changes:
        before = f"{change.before:.3f}" if change.before is not None else "  -  "
        lines.append(f"  {change.key:<52} {before} -> {change.after:.3f}")
    return "\n".join(lines)
