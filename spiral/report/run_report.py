"""`spiral report run=PATH`: plots and a markdown summary of a finished (or running) run.

Reads PATH/metrics.jsonl, draws the standard curves into PATH/report/ and writes
PATH/report/summary.md (also printed): for each key metric, its first and last value
and the change. Choices made here:

- The CLI takes key=value pairs like every other `spiral` command; `--help` prints them.
- Key metrics are chosen by pattern (`SUMMARY_PATTERNS`), so a run over several games
  lists each game and seat without configuration.
- "First" and "last" are the first and last rows where the metric has a value, each with
  its step: evaluation runs only every k steps, so its first value is not at step 1.
- Without matplotlib the summary is still written and says the plots were skipped and
  which extra to install.
- Every file the report writes is checked before it reads the run
  (`spiral.report.writable`), and a damaged run gives one line, never a traceback:
  damaged metrics rows are skipped and named (`sinks.py`), fields of config.json of
  another type are left out and named (`html_parts.read_config`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import chz

from spiral.args import UsageError, help_text, parse_command, wants_help
from spiral.report.plots import CURVES, matching_keys, plot_curves
from spiral.report.sinks import read_jsonl
from spiral.report.summary import format_before_after
from spiral.report.writable import check_writable_file, check_writable_folder


@chz.chz
class ReportArgs:
    """usage: spiral report run=PATH [out=PATH]

    Plots and a markdown summary of a run's metrics.jsonl."""

    run: str = chz.field(doc="a run folder holding metrics.jsonl (written by `spiral train`)")
    out: str = chz.field(
        default="", doc="where to write plots and summary.md (default: RUN/report)"
    )


SUMMARY_PATTERNS: tuple[str, ...] = (
    "eval/*win_rate",
    "eval/*/exploitability*",
    "eval/*/value_vs_nash_seat*",
    "train/*/seat*/win_rate",
    "train/*invalid_rate",
    "train/*/draw_rate",
    "train/*/seat*/mean_response_tokens",
    "rae/*/baseline_updated",
    "*assemble/mean_advantage",
    "*approx_kl",
    "train/move_floor_deficit",
)


def _first_last(rows: Sequence[dict[str, Any]], key: str) -> tuple[tuple[int, float], ...]:
    points = [(int(r["step"]), float(r[key])) for r in rows if r.get(key) is not None]
    return (points[0], points[-1]) if points else ()


def summarize(rows: Sequence[dict[str, Any]], run: Path, plots: Sequence[Path], note: str) -> str:
    """The markdown summary of a run's rows."""
    steps = [int(r["step"]) for r in rows if "step" in r]
    times = [float(r["time"]) for r in rows if r.get("time") is not None]
    lines = [f"# Run report: {run.name}", ""]
    lines.append(f"- folder: `{run}`")
    lines.append(
        f"- rows: {len(rows)}, steps {min(steps)} to {max(steps)}" if steps else "- rows: 0"
    )
    if len(times) >= 2:
        lines.append(f"- wall time logged: {(max(times) - min(times)) / 60:.1f} min")
    lines += ["", "## Before -> after", "", "```", format_before_after(rows), "```"]
    lines += ["", "## Key metrics", ""]
    keys = list(dict.fromkeys(k for p in SUMMARY_PATTERNS for k in matching_keys(rows, [p])))
    table = []
    for key in keys:
        ends = _first_last(rows, key)
        if ends:
            (s0, v0), (s1, v1) = ends
            table.append(
                f"| `{key}` | {v0:.4g} (step {s0}) | {v1:.4g} (step {s1}) | {v1 - v0:+.4g} |"
            )
    if table:
        lines += ["| metric | first | last | change |", "|---|---|---|---|", *table]
    else:
        lines.append("No key metrics found (patterns: " + ", ".join(SUMMARY_PATTERNS) + ").")
    lines += ["", "## Plots", ""]
    lines += [f"![{p.stem}]({p.name})" for p in plots] or ["No plots."]
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def main(args: list[str]) -> int:
    """Entry point for `spiral report`; returns the process exit code."""
    if wants_help(args):
        print(help_text(ReportArgs, "report"))
        return 0
    options = parse_command(ReportArgs, args, "report")
    run = Path(options.run)
    metrics = run / "metrics.jsonl"
    _check_metrics(metrics)
    out = Path(options.out or run / "report")
    check_writable_folder(out, "out")
    for name in ("summary.md", "index.html", *(f"{c.name}.png" for c in CURVES)):
        check_writable_file(out / name)
    try:
        rows = read_jsonl(metrics, damaged="skip")
    except OSError as err:
        raise UsageError(f"cannot read {metrics}: {err.strerror}") from None
    out.mkdir(parents=True, exist_ok=True)
    note = ""
    try:
        plots = plot_curves(rows, out)
    except ImportError as err:
        plots, note = [], f"Plots skipped: {err}"
    summary = summarize(rows, run, plots, note)
    (out / "summary.md").write_text(summary, encoding="utf-8")
    print(summary, end="")
    if not note:  # the page's curves need matplotlib too
        from spiral.report.html import build_html

        page = out / "index.html"
        page.write_text(build_html(run, rows), encoding="utf-8")
        print(f"\nHTML report: {page} ({page.stat().st_size / 1024:.0f} KB, self-contained)")
    return 0


def _check_metrics(metrics: Path) -> None:
    """One line when the run's metrics file is not there to read."""
    if metrics.is_file():
        return
    if metrics.is_dir():
        raise UsageError(
            f"{metrics} is a folder, not the run's metrics: move it away and put the "
            "run's metrics.jsonl back in its place"
        )
    if metrics.is_symlink():
        raise UsageError(
            f"{metrics} is a link to {os.readlink(metrics)}, which is missing: put the "
            "file back there, or the run's metrics.jsonl in the link's place"
        )
    raise UsageError(
        f"no metrics.jsonl in {metrics.parent}; pass the run folder that `spiral train` "
        "wrote (it holds config.json and metrics.jsonl)"
    )
