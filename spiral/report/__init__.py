"""What happened in a run: metrics sinks, console progress, transcripts, plots, run report.

JSONL in the run folder is the source of truth; W&B and TensorBoard are optional sinks
imported only when built, and matplotlib only when a plot is drawn, so importing this
package costs nothing extra. This layer imports only `spiral.types` and, for the Kuhn
strategy table, the game facts of `spiral.games.kuhn_equilibrium`.
"""

from spiral.report.console import format_duration, format_progress
from spiral.report.plots import CURVES, plot_learning_curve, plot_metrics
from spiral.report.sinks import (
    JsonlSink,
    MetricsSink,
    MultiSink,
    NullSink,
    TensorBoardSink,
    WandbSink,
    read_jsonl,
)
from spiral.report.transcripts import episode_to_dict, format_episode, write_transcripts

__all__ = [
    "CURVES",
    "JsonlSink",
    "MetricsSink",
    "MultiSink",
    "NullSink",
    "TensorBoardSink",
    "WandbSink",
    "episode_to_dict",
    "format_duration",
    "format_episode",
    "format_progress",
    "plot_learning_curve",
    "plot_metrics",
    "read_jsonl",
    "write_transcripts",
]
