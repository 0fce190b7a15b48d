"""Where finished Kuhn runs ended, last iterate against the average of their policies.

    python docs/results/kuhn-iterate-average/iterate_average_of_runs.py OUT_DIR METRICS.jsonl...

For each run: the exact exploitability of its live policy and of its averaged weights at
the last evaluation, and of the average of the policies it was evaluated at (every
evaluation, and the later half; `spiral/analysis/iterate_average.py`); then mean ±
sample std and range over the runs. Writes OUT_DIR/table.md and OUT_DIR/runs.jsonl.
For a user's own seeds, `spiral seeds` reports the same averages in its `seeds.md`.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from spiral.analysis.exploitability import KUHN_GAME_ID
from spiral.analysis.iterate_average import iterate_average_metrics, logged_tables
from spiral.report.sinks import read_jsonl

P = f"eval/{KUHN_GAME_ID}"
COLUMNS = {
    "live": f"{P}/exploitability_t1",
    "averaged weights": f"{P}/averaged/exploitability_t1",
    "average of policies": f"{P}/iterates_average/exploitability_t1",
    "average, later half": f"{P}/iterates_second_half/exploitability_t1",
}


def _last(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return float(values[-1]) if values else None


def main() -> None:
    out, files = Path(sys.argv[1]), sys.argv[2:]
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for name in files:
        rows = read_jsonl(Path(name))
        values = {**{k: _last(rows, k) for k in COLUMNS.values()}, **iterate_average_metrics(rows)}
        steps = [s for s, _ in logged_tables(rows)]
        runs.append(
            {
                "run": name,
                "evaluated_steps": steps,
                **{c: values.get(k) for c, k in COLUMNS.items()},
            }
        )
    lines = [
        "| run | evaluations | " + " | ".join(COLUMNS) + " |",
        "|---|---|" + "---|" * len(COLUMNS),
    ]
    for r in runs:
        cells = " | ".join("-" if r[c] is None else f"{r[c]:.3f}" for c in COLUMNS)
        lines.append(f"| {r['run']} | {len(r['evaluated_steps'])} | {cells} |")
    stats = []
    for c in COLUMNS:
        xs = [r[c] for r in runs if r[c] is not None]
        sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
        stats.append(
            f"**{statistics.fmean(xs):.3f} ± {sd:.3f}** ({min(xs):.3f}-{max(xs):.3f}, n = {len(xs)})"
        )
    lines.append("| all | | " + " | ".join(stats) + " |")
    table = "\n".join(lines) + "\n"
    (out / "table.md").write_text(table)
    with (out / "runs.jsonl").open("w") as f:
        for r in runs:
            f.write(json.dumps(r) + "\n")
    print(table)


if __name__ == "__main__":
    main()
