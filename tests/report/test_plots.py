"""Plots: real matplotlib renders to PNG files that exist and are not blank."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from spiral.report.plots import matching_keys, plot_learning_curve, plot_metrics
from spiral.report.sinks import JsonlSink

pytest.importorskip("matplotlib")

WIN = "eval/TicTacToe-v0/random/seat{}/win_rate"
INVALID = "train/TicTacToe-v0/seat{}/invalid_rate"


def _assert_real_png(path: Path) -> None:
    from matplotlib.image import imread

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 5_000
    pixels = imread(path)
    assert pixels.shape[:2] == (400, 900)
    assert float(np.std(pixels)) > 0.01, "the image is blank"


def _rows() -> list[dict[str, float | None]]:
    rows: list[dict[str, float | None]] = []
    for step in range(1, 11):
        rows.append(
            {
                "step": step,
                "time": 1000.0 + step,
                INVALID.format(0): 0.5 / step,
                INVALID.format(1): 0.4 / step,
                "train/overall/invalid_rate": 0.45 / step,
                # Evaluated every other step only; None where it failed.
                **({WIN.format(0): 0.5 + 0.04 * step} if step % 2 == 0 else {}),
                WIN.format(1): None if step == 5 else 0.3 + 0.05 * step,
            }
        )
    return rows


def test_plot_metrics_renders_a_png(tmp_path: Path) -> None:
    out = plot_metrics(_rows(), [INVALID.format(0), "no/such/key"], tmp_path / "sub" / "p.png", "t")
    assert out == tmp_path / "sub" / "p.png"
    _assert_real_png(out)


def test_plot_metrics_without_any_data_fails_loudly(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="none of the keys"):
        plot_metrics(_rows(), ["no/such/key"], tmp_path / "p.png")
    assert not (tmp_path / "p.png").exists()


def test_matching_keys_globs_across_slashes() -> None:
    keys = matching_keys(_rows(), ["eval/*/random/seat*/win_rate"])
    assert keys == [WIN.format(0), WIN.format(1)]
    assert matching_keys(_rows(), ["train/*/seat*/invalid_rate"]) == [
        INVALID.format(0),
        INVALID.format(1),
    ]
    assert matching_keys(_rows(), ["step", "time"]) == []


def test_learning_curves_from_metrics_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    sink = JsonlSink(path)
    for row in _rows():
        step = int(row.pop("step") or 0)
        row.pop("time")
        sink.log({k: v for k, v in row.items() if v is not None}, step=step)
    sink.close()
    paths = plot_learning_curve(path, tmp_path / "report")
    assert sorted(p.name for p in paths) == [
        "eval_results.png", "invalid_rate.png", "win_rate_vs_random.png"
    ]  # fmt: skip
    for p in paths:
        assert p.parent == tmp_path / "report"
        _assert_real_png(p)


def test_wilson_band_is_drawn_and_not_plotted_as_a_line(tmp_path: Path) -> None:
    from matplotlib.image import imread

    key = WIN.format(0)
    plain = [{"step": s, key: 0.1 * s} for s in range(1, 6)]
    banded = [{**r, f"{key}_low": r[key] - 0.05, f"{key}_high": r[key] + 0.05} for r in plain]
    # The curve patterns pick the rate, not its interval bounds.
    assert matching_keys(banded, ["eval/*/random/seat*/win_rate"]) == [key]
    a = plot_metrics(plain, [key], tmp_path / "plain.png")
    b = plot_metrics(banded, [key], tmp_path / "banded.png")
    _assert_real_png(b)
    assert not np.array_equal(imread(a), imread(b)), "the interval band was not drawn"


def test_exploitability_curve_is_drawn_when_logged(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    sink = JsonlSink(path)
    for step, value in enumerate([0.66, 0.36, 0.34]):
        sink.log(
            {
                "eval/KuhnPokerSingle-v0/exploitability": value,
                "eval/KuhnPokerSingle-v0/value_vs_nash_seat0": -value / 3,
            },
            step=step * 5,
        )
    sink.close()
    paths = plot_learning_curve(path, tmp_path / "report")
    assert [p.name for p in paths] == ["exploitability.png"]
    _assert_real_png(paths[0])


def test_constant_keys_are_left_out_and_labels_say_what_differs(tmp_path: Path) -> None:
    from spiral.report.plots import short_labels, varying_keys

    rows = [{"step": s, "a/x/seat0/r": 0.0, "a/x/seat1/r": 0.1 * s} for s in range(4)]
    assert varying_keys(rows, ["a/x/seat0/r", "a/x/seat1/r"]) == ["a/x/seat1/r"]
    assert short_labels(["a/x/seat0/r", "a/x/seat1/r"]) == {
        "a/x/seat0/r": "seat0",
        "a/x/seat1/r": "seat1",
    }
    assert short_labels(["eval/G/exploitability_t1", "eval/G/averaged/exploitability_t1"]) == {
        "eval/G/exploitability_t1": "exploitability_t1",
        "eval/G/averaged/exploitability_t1": "averaged/exploitability_t1",
    }
    assert short_labels(["perf/games_per_s"]) == {"perf/games_per_s": "perf/games_per_s"}
    path = tmp_path / "metrics.jsonl"
    sink = JsonlSink(path)
    for row in rows:
        sink.log({"train/overall/invalid_rate": 0.0, "train/overall/draw_rate": 0.0}, row["step"])
    sink.close()
    assert plot_learning_curve(path, tmp_path / "report") == []  # nothing moved: no plot
