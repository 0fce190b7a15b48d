"""Small pieces the report page is built from: a table, a rate with its interval, a JSON
file read leniently (a damaged or missing file is left out of the page, not a crash), and
the run's config with the fields the page reads checked for their type."""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence
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


# The config fields the page reads: what each must be, and the test of it.
CONFIG_FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "model_name": ("a string", lambda v: isinstance(v, str)),
    "env_ids": (
        "a list of game ids",
        lambda v: isinstance(v, list) and all(isinstance(g, str) for g in v),
    ),
    "max_steps": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
}
CONFIG_FIX = "fix it, or copy the config from a checkpoint's loop_state.json"


def read_config(path: Path) -> tuple[dict[str, Any], list[str]]:
    """The run's config.json as the page can use it, and one line for each part left out:
    the whole file when it is not a JSON object, else each field the page reads that
    holds another type (a hand edit or damage; the page would show it wrong or fail)."""
    if not path.exists():
        return {}, []  # a run folder from before configs were kept: nothing to say
    data = read_json(path)
    if not isinstance(data, dict):
        if path.is_dir():
            kind = "a folder"
        elif data is None:
            kind = "not JSON"
        else:
            kind = f"a JSON {type(data).__name__}, not an object"
        return {}, [f"{path} is {kind}: the report leaves the config out ({CONFIG_FIX})"]
    notes = []
    for key, (noun, fits) in CONFIG_FIELDS.items():
        if key in data and not fits(data[key]):
            found = repr(data.pop(key))
            found = found if len(found) <= 40 else found[:37] + "..."
            notes.append(
                f"{path}: {key} is {found}, not {noun}: the report leaves it out ({CONFIG_FIX})"
            )
    return data, notes
