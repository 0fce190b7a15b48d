"""Small pieces the report page is built from: a table, a rate with its interval, a JSON
file read leniently (a damaged or missing file is left out of the page, not a crash)."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Cell = Any  # a value, or (value, css class) to colour the cell


def table(header: Sequence[str], body: Sequence[Sequence[Cell]], left: int = 1) -> str:
    """An HTML table; the first `left` columns align left (labels), the rest right."""

    def cell(tag: str, i: int, value: Cell) -> str:
        classes = ["l"] if i < left else []
        if isinstance(value, tuple):
            value, extra = value
            classes.append(extra)
        attr = f' class="{" ".join(classes)}"' if classes else ""
        return f"<{tag}{attr}>{html.escape(str(value))}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(header))
    rows = "".join(
        "<tr>" + "".join(cell("td", i, v) for i, v in enumerate(row)) + "</tr>" for row in body
    )
    return f"<table><tr>{head}</tr>{rows}</table>"


def rate(value: float | None, interval: tuple[float, float] | None = None) -> str:
    """`0.47 [0.37, 0.57]`, `0.47`, or `-` when not measured."""
    if value is None:
        return "-"
    if interval is None:
        return f"{value:.3f}"
    return f"{value:.2f} [{interval[0]:.2f}, {interval[1]:.2f}]"


def read_json(path: Path) -> Any:
    """The file's JSON, or None when it is missing or not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
