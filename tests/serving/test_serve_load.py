"""The serve load benchmark, briefly: the real `spiral serve` under a mix of hostile and
valid requests refuses every hostile one with a 4xx, serves every valid one, and is
alive at the end, with no traceback in its log."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location(
        "serve_load", ROOT / "benchmarks" / "serve_load.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_hostile_requests_under_load_are_refused_and_valid_ones_served(tmp_path: Path) -> None:
    bench = _bench()
    out = tmp_path / "load.json"
    args = ["--seconds", "4", "--clients", "3", "--big-body-mb", "3", "--json", str(out)]
    assert bench.main(args) == 0
    result = json.loads(out.read_text())
    kinds = {key.rpartition(" -> ")[0] for key in result["by_kind_and_status"]}
    assert "small valid" in kinds and len(kinds) >= 6  # the probe and several hostile kinds
    assert result["failures"] == [] and result["tracebacks_in_server_log"] == 0
    assert result["small_loaded_s"]["n"] > 0
    big = result["big_body"]  # 3 MB against the server's 1 MiB default: refused unread
    assert big["status"] == 413 and big["small_beside_status"] == 200


def test_the_rules_catch_a_5xx_and_a_hostile_request_served() -> None:
    bench = _bench()
    result = {
        "by_kind_and_status": {
            "lone surrogate -> 500": 1,
            "long guided_choice -> 200": 2,
            "valid 64 tokens -> 400": 1,
            "client leaves mid-generation -> left": 3,
            "n=2 -> 400": 5,
        },
        "big_body": {"status": 200, "small_beside_status": 200},
        "server_alive_at_end": False,
    }
    assert sorted(bench.failures(result)) == [
        "big body -> 200, the small request beside it -> 200",
        "lone surrogate -> 500: 1",
        "long guided_choice -> 200: 2",
        "the server did not answer at the end",
        "valid 64 tokens -> 400: 1",
    ]
