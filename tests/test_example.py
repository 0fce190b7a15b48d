"""The single-file reference loop keeps working (with a tiny model made here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_minimal_selfplay_runs(tmp_path: Path) -> None:
    from spiral.testing import make_tiny_model

    model = make_tiny_model(tmp_path / "tiny")
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "minimal_selfplay.py"),
            "--model",
            str(model),
            "--steps",
            "2",
            "--games",
            "2",
            "--max-tokens",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("step ")]
    assert len(lines) == 2 and "baselines" in lines[-1]
    assert len((ROOT / "examples" / "minimal_selfplay.py").read_text().splitlines()) < 300
