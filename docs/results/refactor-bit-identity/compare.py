"""The first steps of `make train` before and after a refactor, key by key.

    bash docs/results/refactor-bit-identity/run_until.sh OLD_CHECKOUT /tmp/before 22
    bash docs/results/refactor-bit-identity/run_until.sh NEW_CHECKOUT /tmp/after 22
    python docs/results/refactor-bit-identity/compare.py /tmp/before/metrics.jsonl /tmp/after/metrics.jsonl

Kept here: the first check (`before`/`after`, 11 steps, stopped at STEP 10, before the
narrow Learner) and the second (`*-23-steps`, STEP 22, after it).

Both runs on a quiet machine (under load the first update's gradient norm moved in the
third digit in one run: thread timing changes the float sums). Timing keys are left out;
every other key is compared for equality, and the differing keys are printed per row.
"""

from __future__ import annotations

import json
import sys

VOLATILE = ("time", "perf/", "progress/")


def main(before: str, after: str) -> int:
    rows_a = [json.loads(line) for line in open(before, encoding="utf-8")]
    rows_b = [json.loads(line) for line in open(after, encoding="utf-8")]
    print(f"{len(rows_a)} rows before, {len(rows_b)} after")
    for a, b in zip(rows_a, rows_b, strict=False):
        keys = sorted(k for k in set(a) | set(b) if not k.startswith(VOLATILE))
        differ = [k for k in keys if a.get(k) != b.get(k)]
        print(f"step {a.get('step')}: {len(keys)} keys, {len(differ)} differ {differ}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:3]))
