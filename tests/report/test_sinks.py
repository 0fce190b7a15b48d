"""Metrics sinks on real files: JSONL rows, torn lines, resume truncation, W&B offline."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from spiral.report.sinks import (
    DamagedMetricsError,
    JsonlSink,
    MetricsSink,
    MultiSink,
    NullSink,
    TensorBoardSink,
    WandbSink,
    read_jsonl,
)


def test_jsonl_rows_have_step_time_and_values(tmp_path: Path) -> None:
    path = tmp_path / "run" / "metrics.jsonl"
    sink = JsonlSink(path)
    sink.log({"train/loss": 0.5, "eval/x": float("nan")}, step=1)
    sink.log({"train/loss": 0.25}, step=2)
    # Flushed per line: readable before close.
    rows = read_jsonl(path)
    sink.close()
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["train/loss"] == 0.5 and rows[1]["train/loss"] == 0.25
    assert rows[0]["eval/x"] is None  # NaN is written as null: strict JSON
    assert all(isinstance(r["time"], float) for r in rows)
    assert all(json.loads(line) for line in path.read_text().splitlines())


def test_reserved_names_are_rejected(tmp_path: Path) -> None:
    sink = JsonlSink(tmp_path / "m.jsonl")
    with pytest.raises(ValueError, match="reserved"):
        sink.log({"step": 3.0}, step=3)
    sink.close()


def test_torn_last_line_is_dropped_but_torn_middle_raises(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1, "a": 1.0}\n{"step": 2, "a": 2.0}\n{"step": 3, "a"')
    assert [r["step"] for r in read_jsonl(path)] == [1, 2]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 1}\n{"ste\n{"step": 3}\n')
    with pytest.raises(DamagedMetricsError, match=r"bad.jsonl:2: damaged metrics row \(not JSON"):
        read_jsonl(bad)


@pytest.mark.parametrize(
    ("middle", "why"),
    [
        (b'{"ste', "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"step": "x", "a": 1}', "step is 'x', not an integer"),
        (b'{"step": 2, "a": "\xff\xfe"}', "not UTF-8"),
    ],
)
def test_a_damaged_middle_row_is_named_refused_or_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture, middle: bytes, why: str
) -> None:
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"step": 1, "a": 1.0}\n' + middle + b'\n{"step": 3, "a": 3.0}\n')
    before = path.read_bytes()
    with pytest.raises(DamagedMetricsError, match=f"m.jsonl:2: damaged metrics row \\({why}"):
        read_jsonl(path)
    assert [r["step"] for r in read_jsonl(path, damaged="skip")] == [1, 3]
    assert "skipped damaged rows at lines 2" in capsys.readouterr().err
    sink = JsonlSink(path)  # resume's truncation refuses too, and changes nothing
    with pytest.raises(DamagedMetricsError, match="m.jsonl:2"):
        sink.truncate_after(3)
    assert path.read_bytes() == before


def test_a_complete_last_row_without_its_newline_stays(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1, "a": 1.0}\n{"step": 2, "a": 2.0}')  # killed before the newline
    assert [r["step"] for r in read_jsonl(path)] == [1, 2]
    sink = JsonlSink(path)
    sink.log({"a": 3.0}, step=3)
    sink.close()
    assert [(r["step"], r["a"]) for r in read_jsonl(path)] == [(1, 1.0), (2, 2.0), (3, 3.0)]


def test_appending_after_a_crash_cuts_the_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1, "a": 1.0}\n{"step": 2, "a"')
    sink = JsonlSink(path)
    sink.log({"a": 2.5}, step=2)
    sink.close()
    rows = read_jsonl(path)
    assert [(r["step"], r["a"]) for r in rows] == [(1, 1.0), (2, 2.5)]


def test_truncate_after_drops_the_lost_future(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    sink = JsonlSink(path)
    for step in range(1, 6):
        sink.log({"a": float(step)}, step=step)
    assert sink.truncate_after(3) == 2
    sink.log({"a": 40.0}, step=4)  # the resumed run continues from step 3
    sink.close()
    assert [(r["step"], r["a"]) for r in read_jsonl(path)] == [(1, 1), (2, 2), (3, 3), (4, 40)]
    assert not path.with_name("m.jsonl.tmp").exists()


def test_multi_and_null_sinks(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    multi = MultiSink([JsonlSink(a), JsonlSink(b), NullSink()])
    multi.log({"x": 1.0}, step=7)
    multi.close()
    assert read_jsonl(a)[0]["x"] == 1.0 and read_jsonl(b)[0]["step"] == 7
    assert all(isinstance(s, MetricsSink) for s in multi.sinks)


def test_wandb_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("wandb") is None:
        pytest.skip("wandb is not installed: pip install 'spiral-selfplay[wandb]'")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    sink = WandbSink("spiral-test", name="t", config={"lr": 1e-4}, dir=tmp_path, mode="offline")
    sink.log({"train/loss": 0.5}, step=1)
    sink.log({"train/loss": 0.25}, step=2)
    assert sink.run.config["lr"] == 1e-4
    sink.close()
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("*.wandb")), "the offline run wrote no .wandb data file"


def test_tensorboard_writes_events_or_says_what_to_install(tmp_path: Path) -> None:
    if importlib.util.find_spec("tensorboard") is None:
        with pytest.raises(ImportError, match=r"spiral-selfplay\[tensorboard\]"):
            TensorBoardSink(tmp_path / "tb")
        return
    sink = TensorBoardSink(tmp_path / "tb")
    sink.log({"train/loss": 0.5}, step=1)
    sink.close()
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
