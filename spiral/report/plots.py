"""Learning-curve plots (PNG) from the rows of a run's metrics.jsonl.

Choices made here:

- matplotlib is an optional extra, imported only when a plot is drawn. Figures are built
  as `matplotlib.figure.Figure` objects and saved through the Agg canvas, never through
  pyplot, so plotting touches no global state and needs no display.
- `plot_metrics` draws one line per key against "step", with a shaded band where the
  rows also carry `<key>_low` / `<key>_high` (evaluation's Wilson intervals). Keys absent
  from every row are skipped, and a row where a key is missing or null just has no point
  for that key (evaluation runs every k steps, so its lines join the steps where it ran).
- `plot_learning_curve` draws a small registry of standard curves (`CURVES`), each a set
  of key patterns (fnmatch, where `*` also crosses "/"): e.g. every
  "eval/<game>/random/seat<k>/win_rate" goes on the win-rate-vs-random plot. Keys whose
  value never changes are left out (`varying_keys`), and a curve with none left is not
  drawn. Legends name what tells the lines apart (`short_labels`), beside the plot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from spiral.report.sinks import read_jsonl


@dataclass(frozen=True)
class Curve:
    """One standard plot: the file stem, its title and the key patterns it draws."""

    name: str
    title: str
    patterns: tuple[str, ...]


CURVES: tuple[Curve, ...] = (
    Curve(
        "invalid_rate",
        "Invalid-move rate",
        ("train/*/seat*/invalid_rate", "train/overall/invalid_rate", "eval/*invalid_rate"),
    ),
    Curve(
        "win_rate_vs_random",
        "Win rate against the random agent",
        ("eval/*/random/seat*/win_rate", "eval/*/random/win_rate"),
    ),
    Curve(
        "exploitability",
        "Exact exploitability (0 = Nash) and value against the Nash player",
        ("eval/*/exploitability*", "eval/*/value_vs_nash_seat*"),
    ),
    Curve(
        "eval_results",
        "Evaluation per opponent and seat: win, draw and loss rates (95% intervals)",
        ("eval/*/seat*/win_rate", "eval/*/seat*/draw_rate", "eval/*/seat*/loss_rate"),
    ),
    Curve("draw_rate", "Draw rate", ("train/*/draw_rate",)),
    Curve(
        "train_win_rate", "Training games: win rate per game and seat", ("train/*/seat*/win_rate",)
    ),
    Curve(
        "loss_diagnostics",
        "Loss diagnostics: importance ratio, clip fraction, KL, entropy, the move floor's deficit",
        (
            "train/ratio_mean",
            "train/clip_frac",
            "train/approx_kl",
            "train/entropy",
            "train/kl",
            "train/move_floor_deficit",
        ),
    ),
    Curve("grad_norm", "Gradient norm and learning rate", ("train/grad_norm", "optim/lr")),
    Curve("throughput", "Throughput", ("perf/games_per_s",)),
    Curve("tokens_per_s", "Tokens per second", ("perf/*tokens_per_s",)),
    Curve(
        "time_per_phase",
        "Seconds per step by phase",
        ("time/sample", "time/train", "time/eval", "time/total"),
    ),
    Curve("memory", "Peak resident memory (MB)", ("perf/peak_rss_mb",)),
    Curve("league", "League ratings (ordinal = mu - 3 sigma)", ("league/*/ordinal",)),
    Curve("population", "Population play: pool and matchups", ("fsp/pool_size", "fsp/*ratio")),
    Curve(
        "async_waits",
        "Async actor-learner: seconds the learner waited for games and the actors for work",
        ("async/wait_s", "actor/idle_s", "actor/play_s"),
    ),
    Curve(
        "async_staleness",
        "Async actor-learner: staleness of trained games (versions) and replay buffer",
        ("async/staleness_*", "replay_buffer/*_age", "train/staleness/*/clip_frac"),
    ),
    Curve("rae_baselines", "RAE baselines per game and seat", ("rae/*/baseline_updated",)),
    Curve("response_tokens", "Mean response length (tokens)", ("train/*/mean_response_tokens",)),
)


def _matplotlib_figure() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError("plots need matplotlib: pip install 'spiral-selfplay[plots]'") from err
    return Figure(figsize=(9, 4), dpi=100)


def matching_keys(rows: Sequence[dict[str, Any]], patterns: Sequence[str]) -> list[str]:
    """Sorted metric keys (not step/time) that match any of the patterns."""
    keys = {k for row in rows for k in row if k not in ("step", "time")}
    return sorted(k for k in keys if any(fnmatchcase(k, p) for p in patterns))


def _series(rows: Sequence[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    steps, values = [], []
    for row in rows:
        value = row.get(key)
        if value is not None and "step" in row:
            steps.append(float(row["step"]))
            values.append(float(value))
    return steps, values


def _interval(
    rows: Sequence[dict[str, Any]], key: str
) -> tuple[list[float], list[float], list[float]] | None:
    """(steps, low, high) where the rows carry `<key>_low` and `<key>_high` (Wilson)."""
    points = [
        (float(r["step"]), float(r[f"{key}_low"]), float(r[f"{key}_high"]))
        for r in rows
        if "step" in r and r.get(f"{key}_low") is not None and r.get(f"{key}_high") is not None
    ]
    if not points:
        return None
    steps, low, high = (list(column) for column in zip(*points, strict=True))
    return steps, low, high


def plot_metrics(rows: list[dict[str, Any]], keys: list[str], out: Path, title: str = "") -> Path:
    """One line per key against step, saved as PNG at `out`."""
    fig = curve_figure(rows, keys, title)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out


def varying_keys(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> list[str]:
    """The keys whose logged values change over the run (a flat line says nothing a
    sentence cannot: `spiral report` names the constant ones instead of drawing them)."""
    return [k for k in keys if len({v for v in _series(rows, k)[1]}) > 1]


def short_labels(keys: Sequence[str]) -> dict[str, str]:
    """Legend labels: each key without the `/`-separated parts every key of the plot
    shares at its start and end (`eval/G/random/seat0/win_rate` and `.../seat1/...` ->
    `seat0`, `seat1`); a lone key keeps its last two parts."""
    parts = [k.split("/") for k in keys]
    if len(parts) == 1:
        return {keys[0]: "/".join(parts[0][-2:])}
    shortest = min(len(p) for p in parts)
    head = 0
    while head < shortest - 1 and len({p[head] for p in parts}) == 1:
        head += 1
    tail = 0
    while tail < shortest - head - 1 and len({p[-1 - tail] for p in parts}) == 1:
        tail += 1
    return {k: "/".join(p[head : len(p) - tail]) for k, p in zip(keys, parts, strict=True)}


def curve_figure(rows: list[dict[str, Any]], keys: list[str], title: str = "") -> Any:
    """The figure `plot_metrics` saves: one line per key against step, intervals shaded,
    labelled by what tells the keys apart, the legend beside the plot."""
    series = {key: _series(rows, key) for key in keys}
    series = {key: xy for key, xy in series.items() if xy[0]}
    if not series:
        raise ValueError(
            f"none of the keys {keys} has a value in the {len(rows)} rows; "
            "check the key names against metrics.jsonl"
        )
    fig = _matplotlib_figure()
    ax = fig.subplots()
    labels = short_labels(list(series))
    for key, (steps, values) in series.items():
        marker = "o" if len(steps) <= 30 else None
        (line,) = ax.plot(
            steps, values, label=labels[key], marker=marker, markersize=3, linewidth=1.2
        )
        band = _interval(rows, key)
        if band is not None:
            ax.fill_between(*band, color=line.get_color(), alpha=0.15, linewidth=0)
    ax.set_xlabel("step")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def plot_learning_curve(metrics_jsonl: Path, out_dir: Path) -> list[Path]:
    """Draw every standard curve that has data; return the PNG paths written."""
    return plot_curves(read_jsonl(metrics_jsonl, damaged="skip"), out_dir)


def plot_curves(rows: Sequence[dict[str, Any]], out_dir: Path) -> list[Path]:
    """`plot_learning_curve` of rows already read."""
    rows = list(rows)
    written = []
    for curve in CURVES:
        keys = varying_keys(rows, matching_keys(rows, curve.patterns))
        if keys:
            written.append(
                plot_metrics(rows, keys, Path(out_dir) / f"{curve.name}.png", curve.title)
            )
    return written
