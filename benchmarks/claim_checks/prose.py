"""The numbers docs/results.md states outside the claims table, each pinned to where its
value is in the data the text cites.

The prose is read as blocks (a paragraph, a list item, a table row) under their headings
(the claims table's own rows are left to its recompute functions). Every number of a block
that states a result (a decimal, a count with thousands separators, a whole percentage;
outside code spans) has a key: its headings and the
words before it in its block, numbers in those words masked, so that one changed number
does not move another's key. A pin (`docs/results/prose-pins.json`) holds, per key, the
number as the text prints it and where that value was found: the first line of a file the
block cites, or else of a file the other blocks of its section cite, whose number rounds to it at the
printed precision (files and folders under docs/results/ or benchmarks/: data and the
tables made from it, not code or other pages). A
number found in no cited file is pinned as "stated" (a game's known value, a published
anchor, a number derived in the sentence itself): its pin holds the value only.

The check: every number of the text has a pin with the same value, every data pin's line
still holds a number that rounds to it, and no pin is left that the text no longer has.
A pin is where an equal value was found, not a recomputation; the claims table's
recompute functions are that. What the pins add is that neither the text nor its data can
change without the check noticing. `claims.py --pin` pins the numbers that have no pin
and drops the pins the text no longer has; existing pins are kept as they are.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .core import DECIMAL, Outcome

# What the prose states as a result: decimals (as the claims table reads them), counts
# written with thousands separators (9,271) and whole percentages (60%).
NUMBER = re.compile(
    DECIMAL.pattern + r"|(?<![\w.,])\d{1,3}(?:,\d{3})+(?![\d.,]\d)|(?<![\w.])\d+(?=%)"
)

PINS = Path("docs/results/prose-pins.json")
CITED = re.compile(r"`((?:docs/results|benchmarks)/[^`*<> ]+)`")  # data, not other pages
RAW = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
DATA_SUFFIXES = {".json", ".jsonl", ".md", ".csv", ".txt", ".log"}
MAX_BYTES = 40_000_000
CONTEXT = 48  # characters of the block before a number that make its key


@dataclass(frozen=True)
class Number:
    key: str
    value: str  # as the text prints it, without a sign
    cited: tuple[str, ...]  # the block's own citations first, then its headings'


def _masked(text: str) -> str:
    """Code spans blanked (same length, line breaks kept), so positions and lines stay and
    settings are not read."""
    return re.sub(r"`[^`]*`", lambda m: re.sub(r"[^\n]", " ", m.group()), text)


def blocks(markdown: str) -> Iterator[tuple[list[str], str]]:
    """(headings, block text) of the text outside the claims table and fenced code."""
    heads: list[str] = []
    block: list[str] = []
    fenced = skipping = False

    def flush() -> Iterator[tuple[list[str], str]]:
        if block and not (skipping and block[0].lstrip().startswith("|")):
            yield list(heads), " ".join(s.strip() for s in block)
        block.clear()

    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            yield from flush()
            continue
        if fenced:
            continue
        if line.startswith("#"):
            yield from flush()
            level = len(line) - len(line.lstrip("#"))
            heads = heads[: level - 1] + [line.strip()]
            skipping = line.strip() == "## Claims"
        elif not line.strip():
            yield from flush()
        elif line.lstrip().startswith(("- ", "* ", "|")) or re.match(r"\s*\d+\. ", line):
            yield from flush()
            block.append(line)
        else:
            block.append(line)
    yield from flush()


def numbers(markdown: str) -> list[Number]:
    """Every decimal number of the prose with its key and the citations around it."""
    found: list[Number] = []
    seen: dict[str, int] = {}
    section_cites: dict[tuple[str, ...], list[str]] = {}
    parsed = list(blocks(markdown))
    for heads, text in parsed:  # a section's citations: those of the blocks right under it
        section_cites.setdefault(tuple(heads), []).extend(CITED.findall(text))
    for heads, text in parsed:
        own = CITED.findall(text)
        around = section_cites[tuple(heads)]
        cited = tuple(dict.fromkeys(own + around))
        masked = _masked(text).replace("**", "  ")
        for m in NUMBER.finditer(masked):
            before = NUMBER.sub("#", masked[max(0, m.start() - CONTEXT) : m.start()])
            base = " > ".join(heads) + " | " + " ".join(before.split())
            seen[base] = seen.get(base, 0) + 1
            key = base if seen[base] == 1 else f"{base} ({seen[base]})"
            found.append(Number(key, m.group().replace(",", ""), cited))
    return found


def rounds_to(raw: str, value: str) -> bool:
    """A data number `raw`, printed as the text prints `value`, is `value` (sign aside)."""
    try:
        x = abs(float(raw))
    except ValueError:
        return False
    if "e" in value.lower():
        mantissa, exponent = value.lower().split("e")
        digits = len(mantissa.partition(".")[2])
        m, e = f"{x:.{digits}e}".split("e")
        return (m, int(e)) == (mantissa, int(exponent))
    digits = len(value.partition(".")[2])
    return f"{x:.{digits}f}" == value


def _files(root: Path, cited: str) -> list[Path]:
    path = root / cited.rstrip("/")
    if path.is_file():
        candidates = [path]
    elif path.is_dir():
        candidates = sorted(p for p in path.rglob("*") if p.is_file())
    else:
        return []
    return [p for p in candidates if p.suffix in DATA_SUFFIXES and p.stat().st_size < MAX_BYTES]


@functools.lru_cache(maxsize=256)
def _lines(path: Path, _mtime: int, _size: int) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def _index(path: Path) -> dict[str, tuple[int, str]]:
    stat = path.stat()
    return _indexed(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4096)
def _indexed(path: Path, _mtime: int, _size: int) -> dict[str, tuple[int, str]]:
    """printed value -> (line, raw) of its first occurrence, at every precision it prints
    to (1-6 decimals, or 0-2 in scientific form)."""
    out: dict[str, tuple[int, str]] = {}
    for n, line in enumerate(_lines(path, _mtime, _size), 1):
        for raw in RAW.findall(line):
            x = abs(float(raw))
            if not math.isfinite(x):
                continue
            for digits in range(0, 7):
                out.setdefault(f"{x:.{digits}f}", (n, raw))
            for digits in range(0, 3):
                out.setdefault(_sci(x, digits), (n, raw))
    return out


def _sci(x: float, digits: int) -> str:
    m, e = f"{x:.{digits}e}".split("e")
    return f"{m}e{int(e)}"


def find(root: Path, number: Number) -> dict[str, Any]:
    """Where the number's value first is in the data it cites, or a stated pin."""
    value = number.value
    if "e" in value.lower():
        mantissa, exponent = value.lower().split("e")
        value = f"{mantissa}e{int(exponent)}"
    for cited in number.cited:
        for path in _files(root, cited):
            hit = _index(path).get(value)
            if hit is not None:
                rel = path.relative_to(root).as_posix()
                return {"value": number.value, "file": rel, "line": hit[0], "raw": hit[1]}
    return {"value": number.value, "stated": True}


def _holds(root: Path, pin: dict[str, Any]) -> bool:
    path = root / pin["file"]
    if not path.is_file():
        return False
    stat = path.stat()
    lines = _lines(path, stat.st_mtime_ns, stat.st_size)
    if not 0 < pin["line"] <= len(lines):
        return False
    line = lines[pin["line"] - 1]
    return pin["raw"] in RAW.findall(line) and rounds_to(pin["raw"], pin["value"])


def read_pins(path: Path) -> dict[str, dict[str, Any]]:
    return dict(json.loads(path.read_text(encoding="utf-8"))) if path.exists() else {}


def check_prose(results: Path, root: Path, pins_path: Path | None = None) -> Outcome:
    """One outcome for every number of the prose: its pin, its value, its data."""
    pins = read_pins(pins_path or root / PINS)
    found = numbers(results.read_text(encoding="utf-8"))
    details: list[str] = []
    for number in found:
        pin = pins.get(number.key)
        if pin is None:
            details.append(f"{number.value} has no pin ({number.key!r}): run claims.py --pin")
        elif pin["value"] != number.value:
            details.append(
                f"text has {number.value}, its pin {pin['value']} ({number.key!r}); if the text "
                f"is the new result, delete that pin from {PINS} and run claims.py --pin"
            )
        elif not pin.get("stated") and not _holds(root, pin):
            where = f"{pin['file']}:{pin['line']}"
            details.append(f"{number.value}: {where} no longer holds it ({number.key!r})")
    stale = set(pins) - {n.key for n in found}
    if stale:
        details.append(f"{len(stale)} pin(s) no number of the text has: run claims.py --pin")
    stated = sum(1 for n in found if pins.get(n.key, {}).get("stated"))
    name = (
        f"docs/results.md outside the claims table: {len(found)} numbers, "
        f"{len(found) - stated} found in the data they cite, {stated} stated"
    )
    return Outcome(name, "DISAGREE" if details else "agree", details)


def pin(
    results: Path, root: Path, pins_path: Path | None = None
) -> tuple[list[tuple[str, dict[str, Any]]], list[tuple[str, dict[str, Any]]]]:
    """Pin the numbers without a pin, drop pins no number has; (added, dropped), each
    (key, pin), for a person to read: a number whose words changed is dropped and added
    again, and only a reader can tell a moved sentence from a changed result."""
    path = pins_path or root / PINS
    pins = read_pins(path)
    found = numbers(results.read_text(encoding="utf-8"))
    keys = {n.key for n in found}
    dropped = [(k, pins.pop(k)) for k in list(pins) if k not in keys]
    added = []
    for number in found:
        if number.key not in pins:
            pins[number.key] = find(root, number)
            added.append((number.key, pins[number.key]))
    path.write_text(json.dumps(pins, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return added, dropped


def described(key: str, pin: dict[str, Any]) -> str:
    where = "stated" if pin.get("stated") else f"{pin['file']}:{pin['line']} ({pin['raw']})"
    return f"{pin['value']} at {key!r}: {where}"
