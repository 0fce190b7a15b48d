"""Where metrics go: JSONL in the run folder (the source of truth), W&B, TensorBoard.

Every sink takes a flat dict of floats and a step. Choices made here:

- **JSONL is authoritative.** One JSON object per line with "step" and the wall-clock
  "time", flushed per line so a crash loses at most the line being written. Non-finite
  floats are written as null, so the file stays strict JSON that any tool can read.
- **One rule for damaged rows.** A last line that does not parse is a write a crash
  tore: dropped. A last line that parses but lost its newline is a complete row: kept
  (JsonlSink adds the newline before appending). Any other damaged row (not JSON, not
  an object, not UTF-8, without an integer "step", a value that is not a number or
  null) is named by its line number: resume refuses to go on in one line
  (`DamagedMetricsError`, nothing rewritten, nothing lost), and reading for a report
  skips it and says so (`damaged="skip"`).
- **Resuming from an earlier checkpoint** calls `truncate_after(step)`, which rewrites
  the file (atomically, via a temporary file and rename) without rows from the lost future.
- W&B and TensorBoard are optional extras, imported only when their sink is built; a
  missing package is named before a run loads its model (`missing_sink_package`), with
  the extra to install.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from spiral.errors import SpiralError

WandbMode = Literal["online", "offline", "disabled"]


@runtime_checkable
class MetricsSink(Protocol):
    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class DamagedMetricsError(SpiralError, ValueError):
    """A metrics row that is neither a complete row nor a torn last line."""


def _row(line: bytes) -> dict[str, Any] | str:
    """The row on a line, or what is wrong with it: every reader takes a row's step as an
    integer and its values as numbers."""
    row = _parsed(line)
    if isinstance(row, str):
        return row
    step = row.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return f"step is {step!r}, not an integer" if "step" in row else "no step"
    for key, value in row.items():
        if not _number(value):
            return f"{key} is {_short(value)}, not a number"
    return row


def _number(value: Any) -> bool:
    """A value a metric can hold: a number a float can take, or null (non-finite)."""
    if value is None or isinstance(value, float | bool):
        return True
    return isinstance(value, int) and abs(value) <= sys.float_info.max


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _parsed(line: bytes) -> dict[str, Any] | str:
    """The JSON object on a line, or why there is none (what a torn write leaves)."""
    try:
        row = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        return "not UTF-8"
    except json.JSONDecodeError as err:
        return f"not JSON ({err.msg})"
    return row if isinstance(row, dict) else "not a JSON object"


def read_jsonl(
    path: Path | str, damaged: Literal["refuse", "skip"] = "refuse"
) -> list[dict[str, Any]]:
    """The rows of a JSONL file by the module's rule: a torn last line dropped, any other
    damaged row refused (`DamagedMetricsError` naming its line) or, with
    `damaged="skip"`, left out with one line on stderr naming the lines."""
    lines = Path(path).read_bytes().split(b"\n")
    if lines and not lines[-1].strip():
        lines.pop()  # the newline that ends the last row
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        row = _row(line)
        if isinstance(row, dict):
            rows.append(row)
            continue
        if number == len(lines) and isinstance(_parsed(line), str):
            break  # a crash mid-write: the last row never finished
        problem = f"{path}:{number}: damaged metrics row ({row})"
        if damaged == "refuse":
            raise DamagedMetricsError(
                f"{problem}; fix or remove that line, then run again (nothing was changed)"
            )
        skipped.append(f"{number} ({row})")
    if skipped:
        print(f"{path}: skipped damaged rows at lines {', '.join(skipped)}", file=sys.stderr)
    return rows


class JsonlSink:
    """Appends one JSON object per `log` call to `path` (the run's metrics.jsonl)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._cut_torn_tail()
        self._file = self._open()

    def _open(self) -> Any:
        # unbuffered: a row the disk refuses is not left in a buffer to fail again at exit
        return self.path.open("ab", buffering=0)

    def _cut_torn_tail(self) -> None:
        """Before appending: a last line without its newline is ended if it is a complete
        row, cut if a crash tore it (the module's rule)."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if not data or data.endswith(b"\n"):
            return
        start = data.rfind(b"\n") + 1
        if isinstance(_row(data[start:]), dict):
            with self.path.open("ab") as handle:
                handle.write(b"\n")
            return
        with self.path.open("r+b") as handle:
            handle.truncate(start)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        reserved = {"step", "time"} & set(metrics)
        if reserved:
            raise ValueError(
                f"metric names {sorted(reserved)} are reserved by JsonlSink; rename them"
            )
        row = {"step": int(step), "time": time.time()}
        row.update({key: _clean(value) for key, value in metrics.items()})
        line = (json.dumps(row, allow_nan=False) + "\n").encode("utf-8")
        try:  # a row torn by a full disk is cut on the next start
            left = memoryview(line)
            while left:
                left = left[self._file.write(left) :]
        except OSError as err:
            raise OSError(err.errno, err.strerror, str(self.path)) from err

    def truncate_after(self, step: int) -> int:
        """Drop rows with step > `step`; return how many were dropped."""
        self._file.close()
        rows = read_jsonl(self.path)
        kept = [row for row in rows if int(row["step"]) <= step]
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as handle:
            for row in kept:
                handle.write(json.dumps(row, allow_nan=False) + "\n")
        os.replace(tmp, self.path)
        self._file = self._open()
        return len(rows) - len(kept)

    def close(self) -> None:
        self._file.close()


class WandbSink:
    """Weights & Biases; `mode="offline"` (or WANDB_MODE=offline) needs no network.

    Pass the `run_id` of an earlier run (`sink.run.id`, saved with the checkpoint) to keep
    logging into the same W&B run after a resume.
    """

    def __init__(
        self,
        project: str,
        name: str | None = None,
        config: Mapping[str, Any] | None = None,
        dir: Path | str | None = None,  # noqa: A002 - wandb's own argument name
        mode: WandbMode | None = None,
        run_id: str | None = None,
    ) -> None:
        try:
            import wandb
        except ImportError as err:
            raise ImportError(
                "WandbSink needs wandb: pip install 'spiral-selfplay[wandb]' "
                "(or drop the W&B sink from the config)"
            ) from err
        if dir is not None:
            Path(dir).mkdir(parents=True, exist_ok=True)
        self._run = wandb.init(
            project=project,
            name=name,
            config=dict(config or {}),
            dir=str(dir) if dir is not None else None,
            mode=mode,
            # A stored run id continues the same W&B run after a resume.
            id=run_id,
            resume="allow" if run_id is not None else None,
            reinit="create_new",
        )

    @property
    def run(self) -> Any:
        return self._run

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self._run.log(dict(metrics), step=step)

    def close(self) -> None:
        self._run.finish()


class TensorBoardSink:
    """TensorBoard event files through torch's SummaryWriter."""

    def __init__(self, logdir: Path | str) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise ImportError(
                "TensorBoardSink needs tensorboard: pip install 'spiral-selfplay[tensorboard]' "
                "(or drop the TensorBoard sink from the config)"
            ) from err
        self._writer = SummaryWriter(log_dir=str(logdir))

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def missing_sink_package(tensorboard: bool = False, wandb: bool = False) -> str | None:
    """The one-line fix when a sink asked for lacks its package, else None (checked
    before a run loads its model, so the fix comes first, not after minutes)."""
    import importlib.util

    wanted = {"tensorboard": tensorboard, "wandb": wandb}
    for package, asked in wanted.items():
        if asked and importlib.util.find_spec(package) is None:
            key = "tensorboard=true" if package == "tensorboard" else "wandb_project="
            return (
                f"{key} needs the {package} package: pip install 'spiral-selfplay[{package}]' "
                f"(or drop {key})"
            )
    return None


class MultiSink:
    """Sends every row to each sink in order."""

    def __init__(self, sinks: Sequence[MetricsSink]) -> None:
        self.sinks = list(sinks)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for sink in self.sinks:
            sink.log(metrics, step)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


class NullSink:
    """Discards everything (tests, dry runs)."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        del metrics, step

    def close(self) -> None:
        pass
