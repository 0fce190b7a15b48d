"""What happened in a run: metrics sinks, console progress, transcripts, plots, run report.

JSONL in the run folder is the source of truth; W&B and TensorBoard are optional sinks
imported only when built, and matplotlib only when a plot is drawn, so importing this
package costs nothing extra. This layer imports only `spiral.types` and, for the Kuhn
strategy table, the game facts of `spiral.games.kuhn_equilibrium`.

Metrics are data: every layer returns flat dicts with slash-namespaced keys
(`train/<game>/seat0/win_rate`, `time/sample`, `perf/...`) and the loop writes them
(`sinks.py`). The rest reads a run folder: the console line (`console.py`) and the console
kept in `RUN/console.log` (`console_log.py`), transcripts and their JSON twins
(`transcripts.py`), curves (`plots.py`), the before -> after of a run's evaluations
(`summary.py`), and `spiral report`'s summary and page (`run_report.py`, `html.py`,
`html_parts.py`, `evaluations.py`, `kuhn_strategy.py`, `run_info.py`). `writable.py` checks
every place a command will write before the work.
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
