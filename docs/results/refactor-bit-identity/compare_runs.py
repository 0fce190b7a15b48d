"""Two runs of the same command, before and after a refactor: metrics key by key, and the
files of one checkpoint byte for byte.

    bash docs/results/refactor-bit-identity/run_until.sh OLD_CHECKOUT /tmp/before 10
    bash docs/results/refactor-bit-identity/run_until.sh NEW_CHECKOUT /tmp/after 10
    python docs/results/refactor-bit-identity/compare_runs.py /tmp/before /tmp/after step_000010

Timing keys are left out of the metrics (`compare.py`). A checkpoint file whose bytes
differ is named; where it is JSON holding a run config (`loop_state.json`), the configs
are compared after reading the earlier one's keys as today's (`spiral.train.legacy_keys`),
so a file that differs only in how the config is written says so.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

VOLATILE = ("time", "perf/", "progress/")


def metrics(before: Path, after: Path) -> int:
    rows_a = [
        json.loads(line)
        for line in (before / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    rows_b = [
        json.loads(line)
        for line in (after / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    differing = 0
    for a, b in zip(rows_a, rows_b, strict=False):
        keys = sorted(k for k in set(a) | set(b) if not k.startswith(VOLATILE))
        differ = [k for k in keys if a.get(k) != b.get(k)]
        differing += bool(differ)
        print(f"metrics step {a.get('step')}: {len(keys)} keys, {len(differ)} differ {differ}")
    return differing


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _config_note(a: Path, b: Path) -> str:
    from spiral.train.legacy_keys import fold

    try:
        old, new = json.loads(a.read_text()), json.loads(b.read_text())
    except ValueError:
        return ""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return ""
    if "target_modules" in old and "target_modules" in new:  # a set PEFT lists in hash order
        as_sets = [{**d, "target_modules": sorted(d["target_modules"])} for d in (old, new)]
        return (
            "; the same adapter config, target_modules listed in another order"
            if as_sets[0] == as_sets[1]
            else ""
        )
    if "config" not in old:
        return ""
    rest = sorted(k for k in set(old) | set(new) if k != "config" and old.get(k) != new.get(k))
    saved: dict[str, Any] = fold(old["config"])
    config = sorted(
        k for k in set(saved) | set(new["config"]) if saved.get(k) != new["config"].get(k)
    )
    return f"; its config read as today's: {len(config)} keys differ {config}, other keys differ {rest}"


def checkpoint(before: Path, after: Path, step: str) -> int:
    a, b = before / "checkpoints" / step, after / "checkpoints" / step
    files = sorted(
        {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
        | {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    )
    differing = 0
    for rel in files:
        fa, fb = a / rel, b / rel
        if not (fa.is_file() and fb.is_file()):
            print(f"{step}/{rel}: only {'before' if fa.is_file() else 'after'}")
            differing += 1
            continue
        same = fa.read_bytes() == fb.read_bytes()
        note = "" if same else _config_note(fa, fb)
        print(
            f"{step}/{rel}: {'identical' if same else 'DIFFERENT'} ({_digest(fa)} / {_digest(fb)}){note}"
        )
        differing += not same
    return differing


if __name__ == "__main__":
    before, after, step = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    m, c = metrics(before, after), checkpoint(before, after, step)
    print(f"{m} metrics rows differ; {c} checkpoint files differ")
