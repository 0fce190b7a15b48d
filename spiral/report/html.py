"""`spiral report`'s HTML page: one self-contained file a researcher opens to look at a run.

What it holds, top to bottom: the run (config, git revision, machine, wall time), the
curves, the league (when the run played a population), the Kuhn strategy table per
evaluation, and game replays (what each seat saw, wrote and meant, move by move).

Choices made here:

- **Self-contained and offline**: the curves are matplotlib PNGs (the report's existing
  plots, `plots.CURVES`) inlined as base64 data URIs; no script, no CDN, no external file,
  so it opens from the file system and from an archived run folder.
- **Small for a long run**: curves are drawn from at most `MAX_POINTS` rows per key
  (evenly downsampled, the last row always kept), and at most `MAX_REPLAYS` games are
  replayed (spread evenly over the steps that have transcripts).
- **Replays** come from the JSON twins of the transcripts the trainer writes
  (`transcripts.replay_dict`): per turn the observation (the board or cards the seat saw,
  i.e. the state after every earlier move), the raw response, the parsed move or the
  parse failure; then the outcome. A step and a game are picked with collapsible
  sections (no JavaScript needed).
- Every text from the run is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spiral.report.plots import CURVES, curve_figure, matching_keys
from spiral.report.transcripts import parse_transcript

MAX_POINTS = 400
MAX_REPLAYS = 40
STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:1em 2em;color:#222}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.8em}
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


def _table(header: Sequence[str], body: Sequence[Sequence[Any]], left: int = 1) -> str:
    def cell(tag: str, i: int, value: Any) -> str:
        cls = ' class="l"' if i < left else ""
        return f"<{tag}{cls}>{html.escape(str(value))}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(header))
    rows = "".join(
        "<tr>" + "".join(cell("td", i, v) for i, v in enumerate(row)) + "</tr>" for row in body
    )
    return f"<table><tr>{head}</tr>{rows}</table>"


def _run_section(run: Path, rows: list[dict[str, Any]]) -> str:
    config = _read_json(run / "config.json") or {}
    info = _read_json(run / "run_info.json") or {}
    times = [float(r["time"]) for r in rows if isinstance(r.get("time"), int | float)]
    steps = [int(r["step"]) for r in rows if "step" in r]
    facts = [
        ("run folder", str(run)),
        ("steps logged", f"{min(steps)}..{max(steps)}" if steps else "none"),
        ("wall time", f"{(max(times) - min(times)) / 60:.1f} min" if len(times) > 1 else "n/a"),
        ("git revision", info.get("git_revision", "unknown")),
        ("machine", info.get("machine", "unknown")),
        ("started", info.get("started", "unknown")),
    ]
    parts = ["<h2>Run</h2>", _table(["", ""], facts, left=2)]
    if config:
        shown = [(k, json.dumps(v)) for k, v in sorted(config.items())]
        parts.append(f"<details><summary>config ({len(shown)} keys)</summary>")
        parts.append(_table(["key", "value"], shown, left=2) + "</details>")
    return "\n".join(parts)


def _curves_section(rows: list[dict[str, Any]]) -> str:
    small = downsample(rows)
    parts = ["<h2>Curves</h2>"]
    drawn = 0
    for curve in CURVES:
        keys = matching_keys(small, curve.patterns)
        if not keys:
            continue
        parts.append(
            f'<h3>{html.escape(curve.title)}</h3><img alt="{html.escape(curve.name)}" '
            f'src="data:image/png;base64,{_png(small, keys, curve.title)}">'
        )
        drawn += 1
    if not drawn:
        parts.append("<p>No curve has data yet.</p>")
    return "\n".join(parts)


def _league_section(run: Path) -> str:
    """The league the run wrote (league.json, spiral.evaluation.league's format): ratings
    sorted by ordinal and the head-to-head matrix. Read as data (report sits below
    evaluation in the layers)."""
    data = _read_json(run / "league.json")
    if not data or not data.get("ratings"):
        return ""
    ratings = data["ratings"]
    names = sorted(ratings, key=lambda n: (-float(ratings[n]["ordinal"]), n))
    record: dict[tuple[str, str], tuple[int, int, int]] = {}
    for pair in data.get("head_to_head", []):
        a, b = pair["a"], pair["b"]
        w, d, lo = int(pair["wins_a"]), int(pair["draws"]), int(pair["losses_a"])
        record[(a, b)], record[(b, a)] = (w, d, lo), (lo, d, w)
    body = []
    for name in names:
        totals = [record[(name, o)] for o in names if (name, o) in record]
        wins, draws, losses = (sum(t[k] for t in totals) for k in range(3))
        r = ratings[name]
        body.append(
            [
                name,
                f"{r['mu']:.2f}",
                f"{r['sigma']:.2f}",
                f"{r['ordinal']:.2f}",
                f"{wins}-{draws}-{losses}",
            ]  # fmt: skip
        )
    matrix = []
    for row in names:
        cells: list[Any] = [row]
        for col in names:
            w, d, lo = record.get((row, col), (0, 0, 0))
            games = w + d + lo
            cells.append(f"{w / games:.2f} ({games})" if games and row != col else "—")
        matrix.append(cells)
    return "\n".join(
        [
            "<h2>League</h2>",
            "<p>openskill Plackett-Luce ratings from the games played (ordinal = mu - 3 sigma).</p>",
            _table(["player", "mu", "sigma", "ordinal", "W-D-L"], body),
            "<h3>Head to head (row's win rate against column, games)</h3>",
            _table(["", *names], matrix),
        ]
    )


def _strategy_section(rows: list[dict[str, Any]]) -> str:
    """The Kuhn strategy table per evaluation: P(bet or call) at each information state."""
    keys = sorted({k for r in rows for k in r if "/p_bet_t1/" in k and "/averaged/" not in k})
    if not keys:
        return ""
    states = [k.rsplit("/", 1)[1] for k in keys]
    body = [[r["step"], *(f"{r[k]:.2f}" for k in keys)] for r in rows if all(k in r for k in keys)]
    return "\n".join(
        [
            "<h2>Kuhn strategy (T = 1)</h2>",
            "<p>P(bet or call) at each information state: card, then the betting so far.</p>",
            _table(["step", *states], body),
        ]
    )


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
            f"<pre>{html.escape(str(turn.get('observation', '')))}</pre>"
        )
        if turn.get("response") is not None:
            parts.append(
                f"<div>response ({html.escape(str(turn.get('stop')))}, "
                f"prompt {turn.get('prompt_tokens')} tokens):</div>"
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
    by_step: dict[int, list[dict[str, Any]]] = {}
    for path in files:
        game = _read_json(path) if path.is_file() else _from_text(path.with_suffix(".txt"))
        if game:
            by_step.setdefault(int(game.get("step", -1)), []).append(game)
    parts = ["<h2>Game replays</h2>", f"<p>{len(files)} games; open a step, then a game.</p>"]
    for step, played in sorted(by_step.items()):
        parts.append(f"<details><summary>step {step} ({len(played)} games)</summary>")
        parts += [_replay(game) for game in played]
        parts.append("</details>")
    return "\n".join(parts)


def _from_text(path: Path) -> dict[str, Any] | None:
    match = re.match(r"step(\d+)_", path.name)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    return parse_transcript(text, int(match.group(1)) if match else -1)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def build_html(run: Path, rows: list[dict[str, Any]]) -> str:
    """The whole page for the run folder `run` with its metrics rows."""
    sections = [
        _run_section(run, rows),
        _curves_section(rows),
        _league_section(run),
        _strategy_section(rows),
        _replays_section(run),
    ]
    title = html.escape(f"Spiral run: {run.name}")
    body = "\n".join(s for s in sections if s)
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f"<style>{STYLE}</style></head><body><h1>{title}</h1>\n{body}\n</body></html>\n"
    )
