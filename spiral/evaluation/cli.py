"""`spiral eval ...`: one checkpoint against opponents (run.py), a run's checkpoints
compared (compare.py), or a run's round-robin league (`league=true`). Dispatching here
keeps run.py and compare.py free of each other (compare builds on run)."""

from __future__ import annotations

import sys
from pathlib import Path

from spiral.agents.model_agent import CheckpointNotFound, make_checkpoint_agent
from spiral.evaluation.compare import compare_main, league_main
from spiral.evaluation.eval_args import EvalError, candidate_overrides, help_text, validate
from spiral.evaluation.inherit import eval_args, inherited_lines
from spiral.evaluation.run import default_out, evaluate_candidate, format_report, write_json


def main(args: list[str]) -> int:
    """`spiral eval ...`; returns 0, or 2 with a message for bad arguments."""
    if any(x in ("-h", "--help", "help") for x in args):
        print(help_text())
        return 0
    try:
        found = eval_args(args)
        print("\n".join(inherited_lines(found)), flush=True)  # before the checks they feed
        a = found.args
        validate(a)
    except (EvalError, CheckpointNotFound, ValueError) as err:
        print(f"spiral eval: {err}", file=sys.stderr)
        return 2
    if a.run and a.league:
        return league_main(a)
    if a.run:
        return compare_main(a, _progress)
    candidate = make_checkpoint_agent(a.checkpoint, seed=a.seed, **candidate_overrides(a))
    report, results = evaluate_candidate(candidate, a, progress=_progress)
    print(format_report(report, results))
    path = write_json(Path(a.out) if a.out else default_out(candidate, a), report)
    print(f"report: {path}")
    return 0


def _progress(line: str) -> None:
    print(line, flush=True)
