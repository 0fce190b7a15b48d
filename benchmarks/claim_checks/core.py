"""The claims table as rows, the registry of recompute functions, and the comparison.

A recompute function takes a `Row` and returns `Check`s: a label and the number (or
phrase) it recomputed from the files the row cites, formatted as the table writes it.
The runner then asks two things of every row: each recomputed value appears in its cell,
and every decimal number in the claim and value cells is one that some check recomputed
(numbers inside backticks are keys and settings, not results).
"""

from __future__ import annotations

import functools
import json
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

KUHN = "eval/KuhnPokerSingle-v0"
LIVE = f"{KUHN}/exploitability_t1"
AVERAGED = f"{KUHN}/averaged/exploitability_t1"
POOL = f"{KUHN}/pool_average/exploitability_t1"
COLUMNS = ("claim", "metric", "value", "machine", "date", "command", "data")
# A decimal number as prose writes it, units (x, %, s) after it or not; not part of a
# version (2.13.0), of a word (Qwen3) or a model's size (0.6B).
DECIMAL = re.compile(r"(?<![\w.])\d[\d,]*\.\d+(?:e-?\d+)?(?!\d|\.\d|B\b)")
# A verdict on a target: every one a cell states must come from a check that judged the
# number against the target (`verdict`), as every decimal must come from the data.
VERDICT = re.compile(r"\b(met|missed)\b")


class NoData(Exception):
    """The row cites no data, or a file it needs is missing or not among those it cites."""


class Check(NamedTuple):
    label: str
    value: str  # formatted as the table writes it
    where: str = "value"  # the cell it must appear in: "claim", "metric" or "value"


def plain(text: str) -> str:
    """A cell without markdown emphasis and code marks."""
    return text.replace("**", "").replace("`", "")


def appears(value: str, text: str) -> bool:
    """`value` in `text`, not as part of a longer number."""
    return re.search(r"(?<![\d.])" + re.escape(value) + r"(?!\d)", plain(text)) is not None


def decimals(text: str) -> list[str]:
    """The decimal numbers of a cell outside its code spans."""
    return DECIMAL.findall(re.sub(r"`[^`]*`", " ", text).replace("**", ""))


# ---- formatting, as the tables write numbers ------------------------------------------


def verdict(label: str, met: bool, text: str, where: str = "value") -> Check:
    """The check of a verdict word: `text` with "{}" replaced by "met" or "missed" as the
    data judged it against the target (the label names the target)."""
    return Check(label, text.format("met" if met else "missed"), where)


def f(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}f}"


def mean_sd(xs: Sequence[float], digits: int = 3) -> str:
    return f"{statistics.fmean(xs):.{digits}f} ± {statistics.stdev(xs):.{digits}f}"


def span(xs: Iterable[float], digits: int = 3, sep: str = "-") -> str:
    """min-max, or the one number when both ends print alike."""
    low, high = f"{min(xs := list(xs)):.{digits}f}", f"{max(xs):.{digits}f}"
    return low if low == high else f"{low}{sep}{high}"


NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def words(n: int) -> str:
    """A small count as prose writes it."""
    return NUMBER_WORDS[n] if 0 <= n < len(NUMBER_WORDS) else str(n)


def thousands(x: float) -> str:
    return f"{x:,.0f}"


def sci(x: float, digits: int = 1) -> str:
    """1.2e-4, as prose writes it (not Python's 1.2e-04)."""
    mantissa, exponent = f"{x:.{digits}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


# ---- the table -----------------------------------------------------------------------


@dataclass
class Row:
    """One row of the claims table, with access to the files its data cell cites."""

    cells: dict[str, str]
    root: Path
    table: Table | None = None

    @property
    def claim(self) -> str:
        return plain(self.cells["claim"]).strip()

    def cited(self) -> list[str]:
        """The paths the data cell names: code spans under docs/, tests/, benchmarks/ or
        spiral/ (files, or folders ending in a slash); patterns and notes are left out."""
        spans = re.findall(r"`([^`]+)`", self.cells["data"])
        top = ("docs/", "tests/", "benchmarks/", "spiral/")
        return [s for s in spans if s.startswith(top) and not any(c in s for c in "*<> ")]

    def missing(self) -> str | None:
        """Why the row has no data, or None."""
        cited = self.cited()
        if not cited:
            return "the row cites no data"
        gone = [p for p in cited if not (self.root / p).exists()]
        return f"missing: {', '.join(gone)}" if gone else None

    def path(self, rel: str) -> Path:
        """A file the row cites (itself or inside a cited folder), which must exist."""
        if not any(
            rel == c.rstrip("/") or rel.startswith(c.rstrip("/") + "/") for c in self.cited()
        ):
            raise NoData(f"{rel} is not in the row's data cell")
        p = self.root / rel
        if not p.is_file():
            raise NoData(f"missing: {rel}")
        return p

    def glob(self, folder: str, pattern: str) -> list[str]:
        """Files of a cited folder matching `pattern`, sorted, as root-relative paths."""
        base = self.root / folder
        found = sorted(p.relative_to(self.root).as_posix() for p in base.glob(pattern))
        if not found:
            raise NoData(f"no {pattern} in {folder}")
        for rel in found:
            self.path(rel)  # cited and present
        return found

    def text(self, rel: str) -> str:
        return _read(*_stamp(self.path(rel)))

    def json(self, rel: str) -> Any:
        return json.loads(self.text(rel))

    def metrics(self, rel: str) -> list[dict[str, Any]]:
        """The rows of a JSONL file (shared between calls: read, do not change)."""
        return _rows(*_stamp(self.path(rel)))

    def evals(self, rel: str, key: str = LIVE) -> dict[int, float]:
        """step -> value of one evaluation key in a metrics file."""
        return {int(r["step"]): float(r[key]) for r in self.metrics(rel) if key in r}

    def final(self, rel: str, key: str = LIVE, step: int | None = 120) -> float:
        """The value at the last evaluation, which must be `step` when one is given."""
        values = self.evals(rel, key)
        if not values:
            raise NoData(f"{rel} has no {key}")
        last = max(values)
        if step is not None and last != step:
            raise NoData(f"{rel}: last evaluation at step {last}, not {step}")
        return values[last]

    def config(self, rel: str) -> dict[str, Any]:
        return dict(self.json(rel))

    def row(self, prefix: str) -> Row:
        """Another row of the same table (a comparison the claim makes with it)."""
        if self.table is None:
            raise NoData("no table to look up another row in")
        other = self.table.find(prefix)
        reason = other.missing()
        if reason:
            raise NoData(f"the row it compares with: {reason}")
        return other


def _stamp(path: Path) -> tuple[Path, int, int]:
    """A file with its modification time and size: a changed file is read again."""
    stat = path.stat()
    return path, stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=512)
def _read(path: Path, _mtime: int, _size: int) -> str:
    return path.read_text(encoding="utf-8")


@functools.lru_cache(maxsize=512)
def _rows(path: Path, mtime: int, size: int) -> list[dict[str, Any]]:
    return [json.loads(line) for line in _read(path, mtime, size).splitlines() if line.strip()]


@dataclass
class Table:
    rows: list[Row]

    def find(self, prefix: str) -> Row:
        for row in self.rows:
            if row.claim.startswith(prefix):
                return row
        raise NoData(f"no row starts with {prefix!r}")


def read_table(results_md: Path, root: Path) -> Table:
    """The rows of the table under "## Claims"."""
    lines = results_md.read_text(encoding="utf-8").splitlines()
    table_lines: list[str] = []
    for line in lines[lines.index("## Claims") + 1 :]:
        if line.startswith("|"):
            table_lines.append(line)
        elif table_lines:
            break
    table = Table([])
    for line in table_lines[2:]:  # after the header and its rule
        cells = [c.strip() for c in split_cells(line)]
        if len(cells) != len(COLUMNS):
            raise ValueError(f"a claims row with {len(cells)} cells: {line[:80]}")
        table.rows.append(Row(dict(zip(COLUMNS, cells, strict=True)), root, table))
    return table


def split_cells(line: str) -> list[str]:
    """The cells of a markdown table row; a pipe inside a code span stays in its cell."""
    cells, cell, in_code = [], "", False
    for ch in line.strip().strip("|"):
        if ch == "`":
            in_code = not in_code
        if ch == "|" and not in_code:
            cells.append(cell)
            cell = ""
        else:
            cell += ch
    cells.append(cell)
    return cells


# ---- the registry and the comparison --------------------------------------------------

Recompute = Callable[[Row], list[Check]]
ROWS: dict[str, Recompute] = {}


def claim(prefix: str) -> Callable[[Recompute], Recompute]:
    """Register the recompute function of the row whose claim starts with `prefix`."""

    def add(fn: Recompute) -> Recompute:
        if prefix in ROWS:
            raise ValueError(f"two functions for {prefix!r}")
        ROWS[prefix] = fn
        return fn

    return add


class Outcome(NamedTuple):
    name: str
    status: str  # "agree", "DISAGREE", "no data", "no function", "error"
    details: list[str]


def compare(name: str, cells: dict[str, str], checks: list[Check]) -> Outcome:
    """Each check's value in its cell; each decimal of the claim and value cells backed by
    a check. A disagreement names both sides: what the data gives and is missing from the
    cell, and the cell's numbers that no recomputed value backs."""
    missing, backed = [], []
    for check in checks:
        if appears(check.value, cells[check.where]):
            backed.append(check)
        else:
            missing.append(f"{check.label}: data {check.value!r}")
    unbacked = [
        number
        for where in ("claim", "value")
        for number in decimals(cells[where])
        if not any(c.where == where and appears(number, c.value) for c in backed)
    ]
    details = missing + (
        [f"table has {', '.join(unbacked)} (no data behind it)"] if unbacked else []
    )
    details += unjudged(cells, backed)
    return Outcome(name, "DISAGREE" if details else "agree", details)


def unjudged(cells: dict[str, str], backed: list[Check]) -> list[str]:
    """The verdict words of the claim and value cells that no check's judgement backs:
    each cell's count of "met" and of "missed" must not exceed the backed checks' count."""
    out = []
    for where in ("claim", "value"):
        said = VERDICT.findall(plain(cells[where]))
        judged = [w for c in backed if c.where == where for w in VERDICT.findall(c.value)]
        for word in ("met", "missed"):
            extra = said.count(word) - judged.count(word)
            if extra > 0:
                out.append(f"table says {word!r} {extra} time(s) with no judgement behind it")
    return out


def run_row(row: Row, registry: dict[str, Recompute]) -> Outcome:
    matches = [p for p in registry if row.claim.startswith(p)]
    name = row.claim[:90]
    if not matches:
        return Outcome(name, "no function", ["no recompute function for this row"])
    reason = row.missing()
    if reason:
        return Outcome(name, "no data", [reason])
    try:
        checks = registry[max(matches, key=len)](row)
    except NoData as err:
        return Outcome(name, "no data", [str(err)])
    except (KeyError, ValueError, IndexError, TypeError) as err:  # a file not as expected
        return Outcome(name, "error", [f"{type(err).__name__}: {err}"])
    if not checks:
        return Outcome(name, "error", ["the function recomputed nothing"])
    return compare(name, row.cells, checks)
