"""Write the counts of a `.ci/run` (or `make test`, then `make test-capped`) log as JSON,
the data of the claims row on a fresh clone.

    SPIRAL_CACHE=$(mktemp -d) .ci/run 2>&1 | tee ci.log
    python benchmarks/record_make_test.py ci.log docs/results/make-test/DATE.json

pytest ends each pass with a line like "1295 passed, 7 skipped, 2 deselected in 912.3s";
the log holds three: the main suite, the vLLM tests, the capped pass (in that order).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

PASSES = ("main", "vllm", "capped")


def summaries(log: str) -> list[dict[str, float]]:
    """Each pytest summary line of the log: counts by outcome, and its seconds."""
    found = []
    for line in log.splitlines():
        timed = re.search(r"\bin ([\d.]+)s\b", line)
        counts = dict(
            (word, int(n)) for n, word in re.findall(r"(\d+) (passed|failed|skipped|error)", line)
        )
        if timed and "passed" in counts:
            found.append({**counts, "seconds": float(timed.group(1))})
    return found


def record(log: str) -> dict[str, float]:
    runs = summaries(log)
    if len(runs) != len(PASSES):
        raise SystemExit(f"expected {len(PASSES)} pytest summaries, found {len(runs)}")
    main, vllm, capped = runs
    return {
        "passed": main["passed"],
        "skipped": main.get("skipped", 0),
        "failed": main.get("failed", 0) + main.get("error", 0),
        "minutes": round(main["seconds"] / 60, 1),
        "vllm_passed": vllm["passed"],
        "vllm_failed": vllm.get("failed", 0) + vllm.get("error", 0),
        "capped_passed": capped["passed"],
        "capped_skipped": capped.get("skipped", 0),
        "capped_failed": capped.get("failed", 0) + capped.get("error", 0),
        "capped_minutes": round(capped["seconds"] / 60, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    result = record(args.log.read_text(encoding="utf-8", errors="replace"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
