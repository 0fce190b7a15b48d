"""Where metrics go: JSONL in the run folder (the source of truth), W&B, TensorBoard.

Every sink takes a flat dict of floats and a step. Choices made here:

- **JSONL is authoritative.** One JSON object per line with "step" and the wall-clock
  "time", flushed per line so a crash loses at most the line being written. Non-finite
  floats are written as null, so the file stays strict JSON that any tool can read.
- **A torn last line is tolerated**, never a torn middle line: `read_jsonl` drops an
  unparseable final line (a crash mid-write) but raises on corruption elsewhere.
  JsonlSink cuts a torn tail before appending, so new rows never glue onto it.
- **Resuming from an earlier checkpoint** calls `truncate_after(step)`, which rewrites
  the file (atomically, via a temporary file and rename) without rows from the lost future.
- W&B and TensorBoard are optional extras, imported only when their sink is built; the
  error says which extra to install.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

WandbMode = Literal["online", "offline", "disabled"]


@runtime_checkable
class MetricsSink(Protocol):
    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def read_jsonl(path: Path | str) -> list[dict[str, Any]]:
    """All rows of a JSONL file; a torn (unparseable) last line is dropped."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            if number == len(lines):
                break  # a crash mid-write: the last row never finished
            raise ValueError(
                f"{path}:{number}: corrupt JSONL row ({err}); fix or remove it"
            ) from err
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{number}: expected a JSON object per line, got {row!r}")
        rows.append(row)
    return rows


class JsonlSink:
    """Appends one JSON object per `log` call to `path` (the run's metrics.jsonl)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._cut_torn_tail()
        self._file = self.path.open("a", encoding="utf-8")

    def _cut_torn_tail(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            # Keep everything up to the last complete line.
            keep = data[: data.rfind(b"\n") + 1]
            with self.path.open("r+b") as handle:
                handle.truncate(len(keep))

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        reserved = {"step", "time"} & set(metrics)
        if reserved:
            raise ValueError(
                f"metric names {sorted(reserved)} are reserved by JsonlSink; rename them"
            )
        row = {"step": int(step), "time": time.time()}
        row.update({key: _clean(value) for key, value in metrics.items()})
        self._file.write(json.dumps(row, allow_nan=False) + "\n")
        self._file.flush()

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
        self._file = self.path.open("a", encoding="utf-8")
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
