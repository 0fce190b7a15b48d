"""`spiral eval ...`: one checkpoint against opponents (run.py), a run's checkpoints
compared (compare.py), or a run's round-robin league (`league=true`). Dispatching here
keeps run.py and compare.py free of each other (compare builds on run)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from spiral.agents.llm_policy import LLMPolicy
from spiral.agents.mixture import MixturePolicy, mixture_checkpoints
from spiral.agents.model_agent import (
    CheckpointNotFound,
    DamagedCheckpoint,
    make_checkpoint_agent,
    resolve_source,
)
from spiral.engines.base import AVERAGED
from spiral.evaluation.compare import compare_main, league_main
from spiral.evaluation.eval_args import (
    EvalArgs,
    EvalError,
    candidate_overrides,
    help_text,
    validate,
)
from spiral.evaluation.inherit import eval_args, inherited_lines
from spiral.evaluation.run import default_out, evaluate_candidate, format_report, write_json
from spiral.evaluation.stdout import KeptStdout
from spiral.report.writable import check_writable_file, check_writable_folder


def main(args: list[str]) -> int:
    """`spiral eval ...`; returns 0, or 2 with a message for bad arguments. Standard
    output that refuses the results (a full disk, /dev/full) ends nothing: they are saved
    to their file, and stderr says so in one line (stdout.py)."""
    if any(x in ("-h", "--help", "help") for x in args):
        print(help_text())
        return 0
    out = KeptStdout(sys.stdout)
    with contextlib.redirect_stdout(out):
        code, saved = _evaluate(args, out)
    if out.lost is not None and code == 0:
        print(
            f"spiral eval: standard output refused the results ({out.lost}); they are saved "
            f"in {saved}",
            file=sys.stderr,
        )
    return code


def _evaluate(args: list[str], out: KeptStdout) -> tuple[int, Path | None]:
    """The evaluation `args` ask for: its exit status and where its results are."""
    try:
        found = eval_args(args)
        print("\n".join(inherited_lines(found)), flush=True)  # before the checks they feed
        a = found.args
        validate(a)
    except (EvalError, CheckpointNotFound, ValueError) as err:
        print(f"spiral eval: {err}", file=sys.stderr)
        return 2, None
    _check_out(a)
    if a.run:
        folder = Path(a.out) if a.out else Path(a.run) / "eval"
        return (league_main(a) if a.league else compare_main(a, _progress)), folder
    try:
        candidate = make_candidate(a)
    except CheckpointNotFound as err:
        print(f"spiral eval: {err}", file=sys.stderr)
        return 2, None
    path = Path(a.out) if a.out else default_out(candidate, a)
    check_writable_file(path, "out")  # the default place too, before the games
    report, results = evaluate_candidate(candidate, a, progress=_progress)
    print(format_report(report, results), flush=True)
    saved = write_json(path, report, printed=out.lost is None)
    print(f"report: {saved}")
    return 0, saved


def make_candidate(a: EvalArgs) -> LLMPolicy | MixturePolicy:
    """The policy `checkpoint=` names, as `weights=` chooses it."""
    overrides = candidate_overrides(a)
    if a.weights == "live":
        return make_checkpoint_agent(a.checkpoint, seed=a.seed, **overrides)
    source = resolve_source(a.checkpoint)
    if source.checkpoint is None:
        raise CheckpointNotFound(
            f"weights={a.weights} needs a run or one of its checkpoints; {a.checkpoint} is "
            "a model folder or a base model"
        )
    if a.weights == "averaged":
        averaged = Path(source.checkpoint) / "learner" / AVERAGED
        if not averaged.is_dir():
            raise CheckpointNotFound(
                f"{source.checkpoint} holds no averaged weights (learner/{AVERAGED}/: the run "
                "kept none, weight_ema_decay=0); use weights=live"
            )
        return make_checkpoint_agent(str(averaged), seed=a.seed, **overrides)
    run = Path(source.checkpoint).parent.parent
    named = None if Path(a.checkpoint).resolve() == run.resolve() else source.step
    folders = mixture_checkpoints(run, a.mixture_from, named)
    members = []
    for i, folder in enumerate(folders):
        try:
            members.append(
                make_checkpoint_agent(str(folder), seed=a.seed, **overrides, name=folder.name)
            )
        except DamagedCheckpoint as err:
            raise DamagedCheckpoint(err.folder, err.problems, _leave_out(folders, i)) from None
    steps = f"{members[0].source.step}-{members[-1].source.step}"
    return MixturePolicy(members, f"{run.name}/mixture_{steps}")


def _leave_out(folders: list[Path], bad: int) -> str:
    """How a mixture leaves out its damaged member `folders[bad]`."""
    if bad + 1 < len(folders):
        after = folders[bad + 1].name.removeprefix("step_").lstrip("0") or "0"
        return f"for weights=mixture, mixture_from={after} starts the mixture after it"
    return (
        "for weights=mixture, name an earlier checkpoint (checkpoint=RUN/checkpoints/step_N) "
        "to end the mixture before it"
    )


def _check_out(a: EvalArgs) -> None:
    """Where the results go, checked before any model loads: an evaluation that runs
    for minutes must not end unable to write what it measured (`report/writable.py`)."""
    if a.run:
        folder = Path(a.out) if a.out else Path(a.run) / "eval"
        if a.out or Path(a.run).is_dir():  # a missing run is refused by name later
            check_writable_folder(folder, "out")
    elif a.out:
        check_writable_file(a.out, "out")


def _progress(line: str) -> None:
    print(line, flush=True)
