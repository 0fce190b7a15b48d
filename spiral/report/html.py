"""`spiral report`'s HTML page: one self-contained file a researcher opens to look at a run.

What it holds, top to bottom: what the run was (model, games, steps, time), the
headline before -> after (first to last evaluation, rates with their 95% intervals), the
curves that moved (constant ones named in a line instead of drawn), the evaluations and
leagues of the run (`evaluations.py`), the Kuhn strategy beside Nash play
(`kuhn_strategy.py`), game replays with the prompt the model read, and the run's
config, revision and machine.

Choices made here:

- **Self-contained and offline**: the curves are matplotlib PNGs (the report's existing
  plots, `plots.CURVES`) inlined as base64 data URIs; no script, no CDN, no external file,
  so it opens from the file system and from an archived run folder.
- **Small for a long run**: curves are drawn from at most `MAX_POINTS` rows per key
  (evenly downsampled, the last row always kept), and at most `MAX_REPLAYS` games are
  replayed (spread evenly over the steps that have transcripts).
- **Replays** come from the JSON twins of the transcripts the trainer writes
  (`transcripts.replay_dict`): per turn the prompt as the model read it (runs written
  before prompts were kept show the observation), the raw response, the parsed move or
  the parse failure; then the outcome. Steps and games open as collapsible sections (no
  JavaScript needed).
- Every text from the run is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spiral.report.evaluations import SHAPE_ERRORS, evaluations_section, leagues_section
from spiral.report.html_parts import rate, read_config, read_json, table
from spiral.report.kuhn_strategy import kuhn_strategy_section
from spiral.report.plots import CURVES, curve_figure, matching_keys, varying_keys
from spiral.report.summary import evaluation_changes
from spiral.report.transcripts import parse_transcript

MAX_POINTS = 400
MAX_REPLAYS = 40
STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:1em 2em;color:#222}
h1{font-size:1.6em;margin-bottom:.1em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.8em}
.lead{color:#555;margin-top:0}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:2px 8px;
text-align:right}th{background:#f4f4f4}td.l,th.l{text-align:left}
img{max-width:100%;border:1px solid #eee;margin:.3em 0}
pre{background:#f7f7f7;padding:.5em;white-space:pre-wrap;margin:.2em 0}
details{margin:.3em 0}summary{cursor:pointer}.bad{color:#b00}.ok{color:#070}
.turn{border-left:3px solid #ccc;padding-left:.8em;margin:.6em 0}
"""


def downsample(rows: Sequence[dict[str, Any]], limit: int = MAX_POINTS) -> list[dict[str, Any]]:
    """At most `limit` rows, evenly spaced, first and last kept (evaluation rows too)."""
    rows = list(rows)
    if len(rows) <= limit:
        return rows
    stride = len(rows) / (limit - 1)
    picked = {round(i * stride) for i in range(limit - 1)} | {len(rows) - 1}
    return [rows[i] for i in sorted(picked) if i < len(rows)]


def _png(rows: list[dict[str, Any]], keys: list[str], title: str) -> str:
    buffer = io.BytesIO()
    curve_figure(rows, keys, title).savefig(buffer, format="png", dpi=80)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _lead(config: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """One line: the model, the games, the steps and the wall time."""
    steps = [int(r["step"]) for r in rows if any(str(k).startswith("train/") for k in r)]
    times = [float(r["time"]) for r in rows if isinstance(r.get("time"), int | float)]
    games = ", ".join(map(str, config.get("env_ids") or [])) or "?"
    minutes = f", {(max(times) - min(times)) / 60:.0f} min" if len(times) > 1 else ""
    done = (
        f"{max(steps) + 1} of {config.get('max_steps') or '?'} steps" if steps else "no steps yet"
    )
    text = f"{config.get('model_name', '?')} on {games}: {done}{minutes}"
    return f'<p class="lead">{html.escape(text)}</p>'


def _summary_section(rows: list[dict[str, Any]]) -> str:
    """Before -> after: the headline metrics at the first and the last evaluation."""
    start, end, changes = evaluation_changes(rows)
    if not changes:
        return "<h2>Before -> after</h2><p>No evaluation yet (eval_every=0, or none ran).</p>"
    body = []
    for c in changes:
        delta = f"{c.after - c.before:+.3f}" if c.before is not None else ""
        body.append(
            [c.game, c.measure, rate(c.before, c.interval_before), rate(c.after, c.interval_after),
             delta]
        )  # fmt: skip
    return "\n".join(
        [
            f"<h2>Before -> after (step {start} -> step {end})</h2>",
            "<p>The first and the last evaluation; rates with their 95% Wilson intervals. "
            "Exploitability: 0 is Nash play.</p>",
            table(["game", "measure", f"step {start}", f"step {end}", "change"], body, left=2),
        ]
    )


def _curves_section(rows: list[dict[str, Any]]) -> str:
    small = downsample(rows)
    parts = ["<h2>Curves</h2>"]
    constant: list[str] = []
    for curve in CURVES:
        keys = matching_keys(small, curve.patterns)
        moving = varying_keys(small, keys)
        if len(moving) < len(keys):
            flat = [k for k in keys if k not in moving]
            values = {r[k] for k in flat for r in small if r.get(k) is not None}
            at = f"at {values.pop():g}" if len(values) == 1 else "each at one value"
            noun = "key" if len(flat) == 1 else "keys"
            constant.append(f"{curve.title.lower()} ({len(flat)} {noun}, {at})")
        if not moving:
            continue
        parts.append(
            f'<h3>{html.escape(curve.title)}</h3><img alt="{html.escape(curve.name)}" '
            f'src="data:image/png;base64,{_png(small, moving, curve.title)}">'
        )
    if len(parts) == 1:
        parts.append("<p>No curve has data yet.</p>")
    if constant:
        parts.append(
            f"<p>Constant over the run, not drawn: {html.escape('; '.join(constant))}.</p>"
        )
    return "\n".join(parts)


def _run_section(run: Path, config: dict[str, Any], notes: Sequence[str]) -> str:
    info = read_json(run / "run_info.json")
    info = info if isinstance(info, dict) else {}
    facts = [
        ("run folder", str(run)),
        ("git revision", info.get("git_revision", "unknown")),
        ("machine", info.get("machine", "unknown")),
        ("started", info.get("started", "unknown")),
    ]
    parts = ["<h2>Run</h2>", table(["", ""], facts, left=2)]
    if config:
        shown = [(k, json.dumps(v)) for k, v in sorted(config.items())]
        parts.append(f"<details><summary>config ({len(shown)} keys)</summary>")
        parts.append(table(["key", "value"], shown, left=2) + "</details>")
    parts += [f'<p class="bad">{html.escape(note)}</p>' for note in notes]
    return "\n".join(parts)


def _replay(game: dict[str, Any]) -> str:
    agents = " vs ".join(f"seat {s}: {a}" for s, a in enumerate(game.get("agents", [])))
    returns = ", ".join(f"{r:+g}" for r in game.get("returns", []))
    head = (
        f"{game.get('game_id')} | seed {game.get('seed')} | {agents} | "
        f"{game.get('outcome')} | returns {returns}"
    )
    parts = [f"<details><summary>{html.escape(head)}</summary>"]
    for number, turn in enumerate(game.get("turns", []), start=1):
        cls = "ok" if turn.get("move") is not None else "bad"
        parts.append(
            f'<div class="turn"><b>turn {number}</b>, seat {turn.get("seat")} '
            f"({html.escape(str(turn.get('agent')))})"
        )
        if turn.get("prompt"):
            parts.append(
                f"<details><summary>the prompt the model read ({turn.get('prompt_tokens')} "
                f"tokens)</summary><pre>{html.escape(str(turn['prompt']))}</pre></details>"
            )
        parts.append(f"<pre>{html.escape(str(turn.get('observation', '')))}</pre>")
        if turn.get("response") is not None:
            parts.append(
                f"<div>response ({html.escape(str(turn.get('stop')))}):</div>"
                f"<pre>{html.escape(str(turn['response']))}</pre>"
            )
        parts.append(f'<div class="{cls}">{html.escape(str(turn.get("result")))}</div></div>')
    moves = " ".join(str(m) for m in game.get("moves", []))
    parts.append(f"<p>moves: {html.escape(moves or '(none)')}</p></details>")
    return "\n".join(parts)


def select_replays(files: Sequence[Path], limit: int = MAX_REPLAYS) -> list[Path]:
    """At most `limit` replay files, spread evenly over the run (sorted by step)."""
    files = sorted(files)
    if len(files) <= limit:
        return files
    stride = len(files) / limit
    return [files[int(i * stride)] for i in range(limit)]


def _replays_section(run: Path) -> str:
    """Replays from the transcripts' JSON twins; a run written before they existed is
    replayed from its text transcripts (`parse_transcript`)."""
    folder = run / "transcripts"
    texts = {p.with_suffix(".json") for p in folder.glob("step*.txt")}
    files = select_replays(sorted(set(folder.glob("step*.json")) | texts))
    if not files:
        return ""
    by_step: dict[int, list[str]] = {}
    skipped = []
    for path in files:
        entry = _replay_entry(path)
        if entry is None:  # a damaged transcript is named, not drawn
            skipped.append(path.name)
        else:
            by_step.setdefault(entry[0], []).append(entry[1])
    shown = len(files) - len(skipped)
    parts = ["<h2>Game replays</h2>", f"<p>{shown} games; open a step, then a game.</p>"]
    for step, played in sorted(by_step.items()):
        parts.append(f"<details><summary>step {step} ({len(played)} games)</summary>")
        parts += played
        parts.append("</details>")
    if skipped:
        parts.append(f"<p>Skipped (unreadable): {html.escape(', '.join(skipped))}</p>")
    return "\n".join(parts)


def _replay_entry(path: Path) -> tuple[int, str] | None:
    """(step, the replay) of one transcript, or None where it is damaged: not JSON, not
    UTF-8, or a field of another shape."""
    try:
        game = read_json(path) if path.is_file() else _from_text(path.with_suffix(".txt"))
        if isinstance(game, dict):
            return int(game.get("step", -1)), _replay(game)
    except SHAPE_ERRORS:
        pass
    return None


def _from_text(path: Path) -> dict[str, Any] | None:
    match = re.match(r"step(\d+)_", path.name)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    return parse_transcript(text, int(match.group(1)) if match else -1)


def build_html(run: Path, rows: list[dict[str, Any]]) -> str:
    """The whole page for the run folder `run` with its metrics rows. What of the run's
    config the page leaves out is said on stderr too, as skipped metrics rows are."""
    config, notes = read_config(run / "config.json")
    for note in notes:
        print(note, file=sys.stderr)
    sections = [
        _lead(config, rows),
        _summary_section(rows),
        _curves_section(rows),
        evaluations_section(run),
        leagues_section(run),
        kuhn_strategy_section(rows),
        _replays_section(run),
        _run_section(run, config, notes),
    ]
    title = html.escape(f"Spiral run: {run.name}")
    body = "\n".join(s for s in sections if s)
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f"<style>{STYLE}</style></head><body><h1>{title}</h1>\n{body}\n</body></html>\n"
    )
