"""Run the `spiral` CLI of another commit with this venv: `git worktree add /tmp/before
2956061`, then `python run_commit.py train preset=embedded-kuhn log_path=runs/make-train-before`.
PYTHONPATH is not enough: the editable install's import hook finds this checkout first."""

import sys

sys.meta_path[:] = [
    f
    for f in sys.meta_path
    if "editable" not in getattr(f, "__module__", "") and "editable" not in str(f)
]
sys.path.insert(0, "/tmp/before")
import spiral

assert spiral.__file__.startswith("/tmp/before"), spiral.__file__
from spiral.cli import main

raise SystemExit(main(sys.argv[1:]))
