"""The reliability probe: every damaged file, hostile folder and bad request that
docs/reliability.md lists, through the real commands, must end recovered or refused in
one line (no traceback, silent wrong result, undetected corruption or hang). Slow (about
six minutes without the process cases): `make test-slow`. Its judge is tested here too."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "reliability_probe.py"


def _probe() -> Any:
    spec = importlib.util.spec_from_file_location("reliability_probe", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_judge_sorts_each_outcome() -> None:
    judged = _probe().judged
    trace = "step 1\nTraceback (most recent call last):\n  File x\nValueError: boom"
    assert judged(None, "", lambda t: True, "silent wrong").kind == "hang"
    assert judged(1, trace, lambda t: True, "silent wrong").kind == "traceback"
    refused = judged(2, "spiral eval: checkpoint X is damaged; pass another", lambda t: True, "x")
    assert (refused.kind, refused.said) == (
        "message",
        "spiral eval: checkpoint X is damaged; pass another",
    )
    assert judged(
        0, "resumed", lambda t: "skipping damaged" in t, "undetected corruption"
    ).kind == ("undetected corruption")
    assert judged(
        0, "skipping damaged checkpoint", lambda t: "skipping damaged" in t, "x"
    ).kind == ("recovered")


@pytest.mark.slow
def test_every_listed_case_is_recovered_or_refused_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    code = _probe().main(["--no-processes", "--json", str(out)])
    result = json.loads(out.read_text())
    assert code == 0, {
        n: o for n, o in result["outcomes"].items() if o["kind"] not in ("recovered", "message")
    }
    assert result["cases"] >= 45
