"""The report's evaluations and leagues: what `spiral eval` wrote into the run folder, and
the league a population run kept while it trained.

- Evaluations: every report `spiral eval` wrote into RUN/eval/ (a checkpoint against
  opponents: rates per game, opponent and seat with their 95% Wilson intervals, exact
  exploitability and math accuracies where measured), oldest first, each under a heading
  that says what was evaluated against what.
- Leagues: RUN/league.json (population play) and every RUN/eval/league_*.json (a
  round-robin of the run's checkpoints): ratings sorted by ordinal and the head-to-head
  matrix.

Files are read as data (the report sits below evaluation in the layers); one that is
damaged or of another shape is named as skipped, never a crash.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from spiral.report.html_parts import rate, read_json, table

RATES = ("win", "draw", "loss", "invalid")


def _is_eval_report(data: Any) -> bool:
    return (
        isinstance(data, dict)
        and isinstance(data.get("results"), list)
        and isinstance(data.get("settings"), dict)
    )


# A field of another shape (a number too large for a float among them).
SHAPE_ERRORS = (AttributeError, KeyError, OverflowError, TypeError, ValueError)


def _is_league(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("ratings"), dict)


def _rate_cell(row: dict[str, Any], label: str) -> str:
    found = row.get(f"{label}_rate") or {}
    try:
        return rate(float(found["value"]), (float(found["low"]), float(found["high"])))
    except (KeyError, TypeError, ValueError):
        return "-"


def _eval_html(path: Path, data: dict[str, Any]) -> str:
    candidate = data.get("candidate") or {}
    settings = data.get("settings") or {}
    games = ", ".join(map(str, settings.get("env_ids") or []))
    opponents = ", ".join(map(str, settings.get("opponents") or []))
    prompt = settings.get("prompt") or {}
    sampling = settings.get("sampling") or {}
    head = (
        f"{candidate.get('name', '?')} on {games} vs {opponents} (seed {settings.get('seed')}, "
        f"{settings.get('games_per_seat')} games per seat)"
    )
    facts = (
        f"file eval/{path.name}; prompt: {prompt.get('template')}, "
        f"{prompt.get('answer_format')}, style {prompt.get('style')}; temperature "
        f"{sampling.get('temperature')}, max_tokens {sampling.get('max_tokens')}"
    )
    body = [
        [r.get("game_id"), r.get("opponent"), r.get("seat"), *(_rate_cell(r, x) for x in RATES),
         r.get("games")]
        for r in data["results"] if isinstance(r, dict)
    ]  # fmt: skip
    parts = [f"<h3>{html.escape(head)}</h3>", f"<p>{html.escape(facts)}</p>"]
    parts.append(table(["game", "opponent", "seat", *RATES, "n"], body, left=2))
    for game, found in (data.get("exploitability") or {}).items():
        if isinstance(found, dict) and isinstance(found.get("exploitability"), int | float):
            parts.append(
                f"<p>{html.escape(game)}: exact exploitability "
                f"<b>{found['exploitability']:.4f}</b> at temperature {found.get('temperature')}"
                " (Nash = 0)</p>"
            )
    for key, value in sorted((data.get("math") or {}).items()):
        if "accuracy" in key and isinstance(value, int | float):
            parts.append(f"<p>{html.escape(key)}: {value:.3f}</p>")
    return "\n".join(parts)


def evaluations_section(run: Path) -> str:
    """Every `spiral eval` report in RUN/eval/, by file time; empty without any."""
    # lstat: a link whose file is gone sorts by its own time, then is skipped as unreadable
    files = sorted((run / "eval").glob("*.json"), key=lambda p: (p.lstat().st_mtime, p.name))
    parts: list[str] = []
    skipped = []
    for path in files:
        data = read_json(path)
        try:
            if _is_eval_report(data):
                parts.append(_eval_html(path, data))
            elif not _is_league(data):
                skipped.append(path.name)
        except SHAPE_ERRORS:
            skipped.append(path.name)
    if not parts and not skipped:
        return ""
    intro = "<p>What <code>spiral eval</code> measured on this run's checkpoints.</p>"
    note = f"<p>Skipped (unreadable): {html.escape(', '.join(skipped))}</p>" if skipped else ""
    return "\n".join(["<h2>Evaluations</h2>", intro, *parts, note])


def _league_html(title: str, data: dict[str, Any]) -> str:
    ratings = {n: r for n, r in data["ratings"].items() if isinstance(r, dict)}
    names = sorted(ratings, key=lambda n: (-float(ratings[n].get("ordinal", 0.0)), n))
    record: dict[tuple[str, str], tuple[int, int, int]] = {}
    for pair in data.get("head_to_head") or []:
        try:
            a, b = str(pair["a"]), str(pair["b"])
            w, d, lo = int(pair["wins_a"]), int(pair["draws"]), int(pair["losses_a"])
        except (KeyError, TypeError, ValueError):
            continue
        record[(a, b)], record[(b, a)] = (w, d, lo), (lo, d, w)
    body = []
    for name in names:
        totals = [record[(name, o)] for o in names if (name, o) in record]
        wins, draws, losses = (sum(t[k] for t in totals) for k in range(3))
        r = ratings[name]
        body.append([name, *(f"{float(r.get(k, 0.0)):.2f}" for k in ("mu", "sigma", "ordinal")),
                     f"{wins}-{draws}-{losses}"])  # fmt: skip
    matrix = []
    for row in names:
        cells: list[Any] = [row]
        for col in names:
            w, d, lo = record.get((row, col), (0, 0, 0))
            played = w + d + lo
            cells.append(f"{w / played:.2f} ({played})" if played and row != col else "—")
        matrix.append(cells)
    return "\n".join(
        [
            f"<h3>{html.escape(title)}</h3>",
            table(["player", "mu", "sigma", "ordinal", "W-D-L"], body),
            "<p>Head to head: the row's win rate against the column (games).</p>",
            table(["", *names], matrix),
        ]
    )


def leagues_section(run: Path) -> str:
    """The population's league and every league of checkpoints; empty without any."""
    found = [("population play (league.json)", run / "league.json")]
    found += [
        (f"checkpoints (eval/{p.name})", p) for p in sorted((run / "eval").glob("league*.json"))
    ]
    parts, skipped = [], []
    for title, path in found:
        data = read_json(path)
        try:
            if _is_league(data) and data["ratings"]:
                parts.append(_league_html(title, data))
        except SHAPE_ERRORS:
            skipped.append(path.name)
    if not parts and not skipped:
        return ""
    intro = "<p>openskill Plackett-Luce ratings from the games played (ordinal = mu - 3 sigma).</p>"
    note = f"<p>Skipped (unreadable): {html.escape(', '.join(skipped))}</p>" if skipped else ""
    return "\n".join(["<h2>Leagues</h2>", intro, *parts, note])
