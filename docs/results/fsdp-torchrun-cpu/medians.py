"""Medians of steps 1-4 of a `spiral train` metrics file (step 0 warms up)."""

import json
import statistics
import sys
from pathlib import Path

KEYS = ("time/total", "time/sample", "time/train", "perf/peak_rss_mb")

for path in sys.argv[1:]:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    steps = [r for r in rows if "time/total" in r][1:]
    medians = {k: round(statistics.median(r[k] for r in steps), 2) for k in KEYS}
    print(path, len(steps), medians)
