"""`spiral eval run=DIR [every=K]`: evaluate a run's checkpoints and compare them in ONE table.

Writes into DIR/eval/, under names that say what they hold (outputs.py; TAG is
`<games>_vs_<opponents>_seed<S>`):
- compare_TAG.csv: long format, one row per (step, game, opponent, seat, metric) with the
  value and, for rates, its 95% Wilson interval (low, high) and n; exploitability rows
  (per game that has one, opponent "best-response", seat -1) when computed, and
  math accuracies (game "math/<bench>", opponent "-", seat -1).
- compare_TAG.md: the same numbers, one row per (step, game, opponent, seat), for reading.
- compare_TAG_win_rate.png: win rate per opponent and seat (one panel per game) against the training
  step, with the Wilson interval shaded; compare_TAG_exploitability.png when
  exploitability is measured.
- each checkpoint's full JSON report, DIR/eval/step_NNNNNN_TAG.json.

Choices:
- every=K keeps checkpoints 0, K, 2K, ... of the list sorted by step, and always the
  newest, so the end of training is never skipped.
- Every checkpoint faces the same seeded games (same `seed`), so differences between
  steps are not differences in deals; model-backed opponents are loaded once.
- Checkpoint folders are read by spiral.agents.model_agent (index.jsonl, COMPLETE), not
  by spiral.train, which sits above evaluation.
- Plots use matplotlib's Agg backend (no display needed); matplotlib is the `plots` extra.

`spiral eval run=DIR league=true games=N` rates the chosen checkpoints against each other
instead (`league_run`): every pair, both seat orders, N games per ordered pair and game,
one rollout with each checkpoint's agent built once; the games are rated in a
spiral.evaluation.league League, written to DIR/eval/league_<games>_seed<S>.json and .md
(ratings table and win matrix). Fixed opponents, exploitability and math are not run then.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spiral.agents.base import Agent
from spiral.agents.model_agent import (
    CheckpointNotFound,
    CheckpointPolicy,
    list_checkpoints,
    make_checkpoint_agent,
)
from spiral.evaluation.eval_args import EvalArgs, candidate_overrides
from spiral.evaluation.league import (
    League,
    play_round_robin,
    record,
    table,
    win_matrix,
    write_league,
)
from spiral.evaluation.model_policy import EXACT_EXPLOITABILITY
from spiral.evaluation.outputs import candidate_part, fresh, fresh_stem, settings_tag
from spiral.evaluation.run import (
    RATE_FIELDS,
    Progress,
    evaluate_candidate,
    format_report,
    write_json,
)
from spiral.prompts.invalid import invalid_policy

CSV_FIELDS = ("step", "game_id", "opponent", "seat", "metric", "value", "low", "high", "n")


@dataclass(frozen=True)
class CompareOutputs:
    """Files written by `compare_run`."""

    csv: Path
    markdown: Path
    plots: tuple[Path, ...]
    reports: tuple[Path, ...]


def select_checkpoints(run_dir: Path, every: int = 1) -> list[tuple[int, Path]]:
    """Every `every`-th complete checkpoint of `run_dir` (by step), always with the newest."""
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    found = list_checkpoints(run_dir)
    if not found:
        raise CheckpointNotFound(
            f"{run_dir} has no complete checkpoints under checkpoints/; is it a run folder?"
        )
    chosen = found[::every]
    if chosen[-1] != found[-1]:
        chosen.append(found[-1])
    return chosen


def _row(
    step: int,
    game_id: str,
    opponent: str,
    seat: int,
    metric: str,
    value: float,
    low: float | str = "",
    high: float | str = "",
    n: int | str = "",
) -> dict[str, Any]:
    return dict(
        zip(CSV_FIELDS, (step, game_id, opponent, seat, metric, value, low, high, n), strict=True)
    )


def report_rows(step: int, report: dict[str, Any]) -> list[dict[str, Any]]:
    """Long-format rows (CSV_FIELDS) of one checkpoint's report."""
    rows: list[dict[str, Any]] = []
    for r in report["results"]:
        key = (step, r["game_id"], r["opponent"], r["seat"])
        for label, _ in RATE_FIELDS:
            rate = r[f"{label}_rate"]
            rows.append(
                _row(*key, f"{label}_rate", rate["value"], rate["low"], rate["high"], r["games"])
            )
        if r.get("mean_return") is not None:  # older reports have none; null: no games
            low, high = (r[b] if r[b] is not None else "" for b in ("return_low", "return_high"))
            rows.append(_row(*key, "mean_return", r["mean_return"], low, high, r["games"]))
        for metric in ("mean_game_length", "mean_response_tokens"):
            rows.append(_row(*key, metric, r[metric], n=r["games"]))
    for game_id, exact in (report.get("exploitability") or {}).items():
        for metric in ("exploitability", "nash_conv"):
            rows.append(_row(step, game_id, "best-response", -1, metric, exact[metric]))
    math = report.get("math") or {}
    for key, value in math.items():
        if key.endswith("/accuracy") and not key.startswith("math/average"):
            bench = key.removesuffix("/accuracy")
            low, high = (
                math.get(f"{bench}/accuracy_low", ""),
                math.get(f"{bench}/accuracy_high", ""),
            )
            rows.append(_row(step, bench, "-", -1, "accuracy", value, low, high))
    return rows


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _cell(row: dict[str, Any]) -> str:
    if row["low"] == "":
        return f"{row['value']:.3g}"
    return f"{row['value']:.2f} [{row['low']:.2f}, {row['high']:.2f}]"


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """One line per (step, game, opponent, seat); one column per metric."""
    metrics: list[str] = []
    table: dict[tuple[Any, ...], dict[str, str]] = {}
    for row in rows:
        if row["metric"] not in metrics:
            metrics.append(row["metric"])
        key = (row["step"], row["game_id"], row["opponent"], row["seat"], row["n"])
        table.setdefault(key, {})[row["metric"]] = _cell(row)
    head = ["step", "game", "opponent", "seat", "n", *metrics]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, cells in table.items():
        seat = "-" if key[3] == -1 else str(key[3])
        values = [str(key[0]), key[1], key[2], seat, str(key[4] or "-")]
        lines.append("| " + " | ".join(values + [cells.get(m, "") for m in metrics]) + " |")
    return "\n".join(lines) + "\n"


def plot_win_rates(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    """Win rate vs step per (opponent, seat), one panel per game, intervals shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wins = [r for r in rows if r["metric"] == "win_rate"]
    game_ids = sorted({r["game_id"] for r in wins})
    fig, axes = plt.subplots(1, len(game_ids), figsize=(5 * len(game_ids), 3.6), squeeze=False)
    for ax, game_id in zip(axes[0], game_ids, strict=True):
        lines = sorted({(r["opponent"], r["seat"]) for r in wins if r["game_id"] == game_id})
        for opponent, seat in lines:
            pts = sorted(
                (r["step"], r["value"], r["low"], r["high"])
                for r in wins
                if (r["game_id"], r["opponent"], r["seat"]) == (game_id, opponent, seat)
            )
            steps = [p[0] for p in pts]
            label = f"vs {opponent}, seat {seat}"
            (line,) = ax.plot(steps, [p[1] for p in pts], marker="o", label=label)
            lows, highs = [p[2] for p in pts], [p[3] for p in pts]
            ax.fill_between(steps, lows, highs, alpha=0.15, color=line.get_color())
        ax.set(title=game_id, xlabel="training step", ylabel="win rate", ylim=(-0.02, 1.02))
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_exploitability(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.6))
    games = sorted({r["game_id"] for r in rows if r["metric"] == "exploitability"})
    for k, game_id in enumerate(games):
        pts = sorted(
            (r["step"], r["value"])
            for r in rows
            if r["metric"] == "exploitability" and r["game_id"] == game_id
        )
        color = f"C{k}"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=color, label=game_id)
        uniform = EXACT_EXPLOITABILITY[game_id].uniform
        ax.axhline(
            uniform, linestyle="--", color=color, alpha=0.5, label=f"uniform ({uniform:.3f})"
        )
    ax.axhline(0.0, linestyle=":", color="black", label="Nash (0)")
    ax.set(title="exploitability", xlabel="training step", ylabel="exploitability")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def compare_run(
    run_dir: Path, a: EvalArgs, out_dir: Path | None = None, progress: Progress | None = None
) -> CompareOutputs:
    """Evaluate the chosen checkpoints of `run_dir` with `a`; write table, plots, reports."""
    out_dir = out_dir or run_dir / "eval"
    tag = settings_tag(a.env_ids, a.opponents, a.seed)
    cache: dict[str, Agent] = {}
    rows: list[dict[str, Any]] = []
    reports: list[Path] = []
    for step, folder in select_checkpoints(run_dir, a.every):
        candidate = make_checkpoint_agent(str(folder), seed=a.seed, **candidate_overrides(a))
        report, results = evaluate_candidate(candidate, a, cache, progress)
        print(format_report(report, results), flush=True)
        name = f"{candidate_part(candidate.name)}_{tag}.json"
        reports.append(write_json(fresh(out_dir / name), report))
        rows += report_rows(step, report)
    stem = fresh_stem(out_dir, f"compare_{tag}", (".csv", ".md"))
    csv_path = write_csv(out_dir / f"{stem}.csv", rows)
    md_path = out_dir / f"{stem}.md"
    md_path.write_text(markdown_table(rows), encoding="utf-8")
    plots = [plot_win_rates(out_dir / f"{stem}_win_rate.png", rows)]
    if a.exploitability:
        plots.append(plot_exploitability(out_dir / f"{stem}_exploitability.png", rows))
    return CompareOutputs(csv_path, md_path, tuple(plots), tuple(reports))


def compare_main(a: EvalArgs, progress: Progress | None = None) -> int:
    """The `run=` branch of `spiral eval` (arguments already validated)."""
    try:
        outputs = compare_run(Path(a.run), a, Path(a.out) if a.out else None, progress)
    except CheckpointNotFound as err:
        print(f"spiral eval: {err}", file=sys.stderr)
        return 2
    print(f"comparison table: {outputs.csv} and {outputs.markdown}")
    print(f"plots: {', '.join(str(p) for p in outputs.plots)}")
    return 0


@dataclass(frozen=True)
class LeagueOutputs:
    """What `league_run` wrote, and the league itself."""

    json: Path
    markdown: Path
    league: League


def league_markdown(league: League) -> str:
    """league.md: the ratings table, then the row-vs-column win matrix."""
    return (
        "## Ratings (PlackettLuce; sorted by ordinal = mu - 3 sigma)\n\n"
        f"{table(league)}\n"
        "## Win rate, row vs column (games)\n\n"
        f"{win_matrix(league)}"
    )


def league_run(run_dir: Path, a: EvalArgs, out_dir: Path | None = None) -> LeagueOutputs:
    """Round-robin between the chosen checkpoints of `run_dir`; rate it, write league.*."""
    out_dir = out_dir or run_dir / "eval"
    chosen = select_checkpoints(run_dir, a.every)
    if len(chosen) < 2:
        raise CheckpointNotFound(
            f"league=true needs at least two complete checkpoints in {run_dir}; found {len(chosen)}"
        )
    players: dict[str, CheckpointPolicy] = {}
    for _, folder in chosen:  # each checkpoint's agent built once, for all its games
        agent = make_checkpoint_agent(str(folder), seed=a.seed, **candidate_overrides(a))
        players[agent.name] = agent
    config = players[next(reversed(players))].source.config  # the newest checkpoint's
    policy = invalid_policy(a.invalid_policy or str(config.get("invalid_move_policy", "spiral")))
    max_turns = int(config.get("max_turns", 0) or 0)
    episodes = play_round_robin(
        players,
        a.env_ids,
        a.games_per_seat,
        policy,
        seed=a.seed,
        game_params={"max_turns": max_turns} if max_turns else None,
    )
    league = record(League(), episodes)
    print(table(league), flush=True)
    stem = fresh_stem(out_dir, f"league_{settings_tag(a.env_ids, (), a.seed)}", (".json", ".md"))
    json_path = write_league(out_dir / f"{stem}.json", league)
    md_path = out_dir / f"{stem}.md"
    md_path.write_text(league_markdown(league), encoding="utf-8")
    return LeagueOutputs(json_path, md_path, league)


def league_main(a: EvalArgs) -> int:
    """The `run=DIR league=true` branch of `spiral eval` (arguments already validated)."""
    try:
        outputs = league_run(Path(a.run), a, Path(a.out) if a.out else None)
    except CheckpointNotFound as err:
        print(f"spiral eval: {err}", file=sys.stderr)
        return 2
    print(f"league: {outputs.json} and {outputs.markdown}")
    return 0
