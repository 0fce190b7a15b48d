"""The fault-injection script, small: a real `spiral train` subprocess killed a few times
(SIGKILL / SIGTERM / SIGINT, some during checkpoint writes), damaged between attempts,
must end with the metrics and weights of an uninterrupted run. Slow: `make test-slow`."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_killed_and_damaged_run_ends_like_an_uninterrupted_one(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "fault_injection.py"
    spec = importlib.util.spec_from_file_location("fault_injection", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "result.json"
    code = module.main(
        ["--kills", "5", "--steps", "4", "--json", str(out), "--workdir", str(tmp_path)]
    )
    result = json.loads(out.read_text())
    assert code == 0, result
    assert result["metrics_equal"] and result["final_weights_equal"]
    assert sum(result["signals"].values()) == 5
    assert result["leftover_temporary_files"] == []
