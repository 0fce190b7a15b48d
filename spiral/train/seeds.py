"""`spiral seeds`: one training configuration over several seeds, and one table of where
each run ended.

    spiral seeds seeds=0-4 out=runs/kuhn-seeds preset=embedded-kuhn [train keys...]

Every key other than `seeds`, `out` and `metrics` is a `spiral train` key. Each seed runs
as its own `spiral train` process, one after another, in `OUT/seed<S>` (a folder that
already holds a run resumes it, so an interrupted sweep is continued by the same
command). Ctrl-C, SIGTERM or SIGHUP is passed on to the running seed's process, which
finishes its step and saves a checkpoint as `spiral train` alone does; the sweep exits
once it has (a second Ctrl-C abandons the step, as for `spiral train`). Killed outright,
the sweep takes the run with it: the run is sent SIGTERM and stops the same way
(`stopping.py`). Then, and with `table_only=true` without training, it writes:

- `OUT/seeds.jsonl`: per seed, the last value of every metric matching `metrics` (glob
  patterns; by default each game's exploitability of the live policy, of the averaged
  weights and of the average of the policies it was evaluated at, and its value against
  Nash, where the run measured them), the step it was read at, and the wall time of the
  seed's training processes (those that trained: one refused, say because another
  process holds the folder, or one that found the run finished, adds nothing);
- `OUT/seeds.md`: the command, then per metric the mean, sample standard deviation,
  minimum and maximum over the seeds, and every seed's value;
- `OUT/curves.png` (with matplotlib): the curve of the first pattern's metric (by
  default the live policy's exploitability) for every seed.

A seed whose run has no value of a metric (it stopped early, or never evaluated) is
shown as missing in that column and left out of its statistics, which say how many runs
they cover.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import math
import os
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import chz

from spiral.args import UsageError, help_text, parse_command, wants_help
from spiral.report.sinks import read_jsonl
from spiral.report.writable import check_writable_file, check_writable_folder
from spiral.train.config import parse_config
from spiral.train.run_lock import LOCK
from spiral.train.stopping import Forwarded

DEFAULT_METRICS = (
    "eval/*/exploitability_t*,eval/*/averaged/exploitability_t*,"
    "eval/*/iterates_*/exploitability_t1,eval/*/value_vs_nash_seat*_t1"
)
OWN_KEYS = ("seeds", "out", "metrics", "table_only")


@chz.chz
class SeedsArgs:
    """usage: spiral seeds seeds=0-4 out=DIR [metrics=...] [train keys...]

    Runs `spiral train` once per seed and writes one table of where the runs ended."""

    seeds: str = chz.field(doc="seeds: a range (0-4) or a list (0,3,7)")
    out: str = chz.field(doc="folder for the runs (OUT/seed<S>) and the table")
    metrics: str = chz.field(default=DEFAULT_METRICS, doc="comma-separated metric patterns")
    table_only: bool = chz.field(default=False, doc="only (re)write the table from OUT")


MAX_SEEDS = 1000  # each seed is a whole training run: more is a typo, not a sweep


def parse_seeds(spec: str) -> list[int]:
    """`0-4` -> [0, 1, 2, 3, 4]; `0,3,7` -> [0, 3, 7]; at most MAX_SEEDS of them, counted
    before any list is made (`0-99999999999` is refused, not allocated)."""
    spans = []
    try:
        for part in spec.split(","):
            low, dash, high = part.strip().partition("-")
            first, last = int(low), int(high) if dash else int(low)
            if first < 0 or last < first:
                raise ValueError
            spans.append((first, last))
    except ValueError:
        raise UsageError(
            f"seeds={spec!r}: expected a range (0-4) or a list (0,3,7) of seeds >= 0"
        ) from None
    if sum(last - first + 1 for first, last in spans) > MAX_SEEDS:
        raise UsageError(
            f"seeds={spec!r} names more than {MAX_SEEDS} seeds, each a whole training run; "
            "name fewer (e.g. seeds=0-4)"
        )
    out = [seed for first, last in spans for seed in range(first, last + 1)]
    if not out or len(set(out)) != len(out):
        raise UsageError(f"seeds={spec!r}: expected distinct seeds, e.g. 0-4")
    return out


def final_values(rows: Sequence[dict[str, Any]], patterns: Sequence[str]) -> dict[str, Any]:
    """The last value of every metric matching `patterns`, with its step; with them the
    average of the run's evaluated Kuhn policies (`iterate_average.py`), read from the
    same rows."""
    from spiral.analysis.iterate_average import logged_tables, tables_metrics

    tables = logged_tables(rows)
    averages = {"step": tables[-1][0], **tables_metrics([t for _, t in tables])} if tables else {}
    out: dict[str, Any] = {}
    for row in [*rows, averages]:
        for key, value in row.items():
            if isinstance(value, (int, float)) and any(fnmatch.fnmatch(key, p) for p in patterns):
                out[key] = float(value)
                out[f"{key}@step"] = int(row.get("step", -1))
    return out


def summarise(values: Sequence[float | None]) -> dict[str, float | int]:
    """Mean, sample standard deviation (0 for one run), min, max and n over the values
    that exist."""
    kept = [v for v in values if v is not None and math.isfinite(v)]
    if not kept:
        return {"n": 0}
    return {
        "n": len(kept),
        "mean": statistics.fmean(kept),
        "std": statistics.stdev(kept) if len(kept) > 1 else 0.0,
        "min": min(kept),
        "max": max(kept),
    }


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def table_markdown(command: str, per_seed: list[dict[str, Any]], keys: list[str]) -> str:
    lines = [f"# {len(per_seed)} seeds", "", f"    {command}", ""]
    lines += ["| metric | mean ± std | min | max | n | " + " | ".join(
        f"seed {r['seed']}" for r in per_seed) + " |"]  # fmt: skip
    lines += ["|" + "---|" * (5 + len(per_seed))]
    for key in keys:
        values = [r["values"].get(key) for r in per_seed]
        s = summarise(values)
        stats = (
            f"{s['mean']:.3f} ± {s['std']:.3f} | {s['min']:.3f} | {s['max']:.3f} | {s['n']}"
            if s["n"]
            else "- | - | - | 0"
        )
        lines.append(f"| {key} | {stats} | " + " | ".join(_fmt(v) for v in values) + " |")
    walls = [r["wall_s"] for r in per_seed]
    timed = summarise([w / 60 if w is not None else None for w in walls])
    lines.append(
        "| wall time (min) | "
        + (
            f"{timed['mean']:.1f} | {timed['min']:.1f} | {timed['max']:.1f} | {timed['n']}"
            if timed["n"]
            else "- | - | - | 0"
        )
        + " | "
        + " | ".join(f"{w / 60:.1f}" if w is not None else "-" for w in walls)
        + " |"
    )
    return "\n".join(lines) + "\n"


CLOCK = "seeds_wall_s.json"


def read_clock(folder: Path) -> float | None:
    """The wall time `spiral seeds` counted for a run folder; None where it trained none
    of it (or the file is unreadable)."""
    try:
        return float(json.loads((folder / CLOCK).read_text())["wall_s"])
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _metrics_mark(folder: Path) -> tuple[int, int] | None:
    try:
        found = (folder / "metrics.jsonl").stat()
    except OSError:
        return None
    return found.st_size, found.st_mtime_ns


def _trained(folder: Path, pid: int, before: tuple[int, int] | None) -> bool:
    """Whether process `pid` trained in `folder`: it held the folder (its lock names it;
    a refused process never writes there) and the metrics changed."""
    try:
        held = (folder / LOCK).read_text().startswith(f"process {pid} ")
    except OSError:
        return False
    return held and _metrics_mark(folder) != before


def _train(seed: int, folder: Path, train_argv: list[str], stop: Forwarded) -> None:
    """One seed's `spiral train` in its own process, the signals `stop` receives passed on
    to it. Its wall time is added to what earlier invocations spent training the same
    folder (an interrupted sweep resumed) if it trained."""
    argv = [sys.executable, "-m", "spiral.cli", "train", *train_argv]
    argv += [f"seed={seed}", f"log_path={folder}"]
    before, start = _metrics_mark(folder), time.monotonic()
    child = stop.run(argv)
    spent = time.monotonic() - start
    if _trained(folder, child.pid, before):
        clock, partial = folder / CLOCK, folder / f".{CLOCK}.tmp"
        partial.write_text(json.dumps({"wall_s": (read_clock(folder) or 0.0) + spent}))
        os.replace(partial, clock)  # whole or not at all, however the sweep ends
    if child.returncode != 0 and not stop.received:
        ended = _ended(child.returncode)
        raise UsageError(f"seed {seed}'s run {ended}; see {folder}/console.log")


def _ended(code: int) -> str:
    """How a process with exit status `code` (negative: the signal that killed it) ended."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"ended with exit code {code}"


def _say(line: str, err: bool = False) -> None:
    """A line for the terminal, which may be gone (SIGHUP: the line is not needed)."""
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr if err else sys.stdout, flush=True)


def _plot(per_seed: list[dict[str, Any]], out: Path, key: str) -> None:
    """`key`'s curve for every seed (from the rows `write_table` read) into curves.png."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in per_seed:
        points = [(row["step"], row[key]) for row in r["rows"] if row.get(key) is not None]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", ms=3, label=f"seed {r['seed']}")
    ax.set_xlabel("step")
    ax.set_ylabel(key)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=120)
    plt.close(fig)


def write_table(args: SeedsArgs, command: str) -> Path:
    out = Path(args.out)
    patterns = [p.strip() for p in args.metrics.split(",") if p.strip()]
    per_seed: list[dict[str, Any]] = []
    for seed in parse_seeds(args.seeds):
        folder = out / f"seed{seed}"
        metrics = folder / "metrics.jsonl"
        rows = read_jsonl(metrics, damaged="skip") if metrics.is_file() else []
        wall = read_clock(folder)  # None: `spiral seeds` trained none of the run
        values = final_values(rows, patterns)
        per_seed.append({"seed": seed, "values": values, "wall_s": wall, "rows": rows})
    keys = sorted({k for r in per_seed for k in r["values"] if not k.endswith("@step")})
    with (out / "seeds.jsonl").open("w", encoding="utf-8") as f:
        for r in per_seed:
            f.write(json.dumps({"seed": r["seed"], "wall_s": r["wall_s"], **r["values"]}) + "\n")
    (out / "seeds.md").write_text(table_markdown(command, per_seed, keys), encoding="utf-8")
    # The first pattern's metric with the fewest path parts: by default the live policy's
    # exploitability (the pattern's `*` also matches the averaged weights' `game/averaged`).
    first = [k for k in keys if patterns and fnmatch.fnmatch(k, patterns[0])]
    if first:
        _plot(per_seed, out, min(first, key=lambda k: (k.count("/"), k)))
    return out / "seeds.md"


def _sweep(seeds: list[int], out: Path, train_argv: list[str]) -> int:
    """Train every seed in turn; 0, or the exit status of a sweep stopped by a signal
    (128 + its number) once the running seed has stopped."""
    started: list[int] = []
    with Forwarded() as stop:
        for seed in seeds:
            if stop.received:
                break
            started.append(seed)
            _say(f"seeds: seed {seed} ({len(started)} of {len(seeds)})")
            _train(seed, out / f"seed{seed}", train_argv, stop)
    if not stop.received:
        return 0
    where = f"during seed {started[-1]}, whose run saved where it stopped (see its console.log)"
    _say(
        f"spiral seeds: stopped by {stop.signal_name} "
        f"{where if started else 'before the first seed'}; run the same command again to "
        "continue the sweep",
        err=True,
    )
    return 128 + stop.received[0]


def _table_only(out: Path, seeds: list[int]) -> str | None:
    """Before a table is rewritten from OUT alone: refuse an OUT that holds no run of these
    seeds, name the seeds it lacks, and give back the command that trained the sweep (the
    one its table records) so the rewritten table keeps it."""
    missing = [s for s in seeds if not (out / f"seed{s}" / "metrics.jsonl").is_file()]
    if len(missing) == len(seeds):
        raise UsageError(
            f"table_only=true: {out} holds no run of seeds {seeds[0]}-{seeds[-1]} (no "
            "seedS/metrics.jsonl); pass the sweep's out=, or drop table_only=true to train them"
        )
    if missing:
        _say(
            f"spiral seeds: no run of seed(s) {missing} under {out}; their columns are empty", True
        )
    table = out / "seeds.md"
    lines = table.read_text(encoding="utf-8").splitlines() if table.is_file() else []
    recorded = lines[2].strip() if len(lines) > 2 else ""
    trained = recorded.startswith("spiral seeds ") and "table_only=true" not in recorded
    return recorded if trained else None


def main(argv: Sequence[str]) -> int:
    if wants_help(argv):
        print(help_text(SeedsArgs, "seeds"))
        return 0
    own = [w for w in argv if w.partition("=")[0] in OWN_KEYS]
    train_argv = [w for w in argv if w.partition("=")[0] not in OWN_KEYS]
    for word in train_argv:
        if word.partition("=")[0] in ("seed", "log_path"):
            raise UsageError(f"{word}: spiral seeds sets seed= and log_path= for each run")
    args = parse_command(SeedsArgs, own, "seeds")
    seeds = parse_seeds(args.seeds)
    parse_config([*train_argv, f"seed={seeds[0]}"])  # the train keys, checked once up front
    command = "spiral seeds " + " ".join(argv)
    out = Path(args.out)
    check_writable_folder(out, "out")  # the runs' folders are checked as each starts
    for name in ("seeds.jsonl", "seeds.md", "curves.png"):
        check_writable_file(out / name)
    if args.table_only:
        command = _table_only(out, seeds) or command
    out.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        stopped = _sweep(seeds, out, train_argv)
        if stopped:
            return stopped
    table = write_table(args, command)
    print(table.read_text(), end="")
    return 0
