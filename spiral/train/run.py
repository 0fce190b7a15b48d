"""`spiral train key=value ...`: parse the config, check it and the machine, hold the run
folder (run_lock.py) before anything is written into it, keep the console in
`RUN/console.log` (report/console_log.py), train, and print the before -> after of the
run's evaluations when it ends (report/summary.py). A refused command line is one line,
exit 2; a run stopped by a signal exits 130."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence

from spiral.engines.torch.parallel.distributed import join_from_env, leave, peers_watched
from spiral.report.console_log import kept_in
from spiral.report.sinks import read_jsonl
from spiral.report.summary import format_before_after
from spiral.train.checkpoint import run_write_refused
from spiral.train.config import ConfigError, TrainConfig, help_text, parse_config
from spiral.train.data_parallel import check_config, shared_setup
from spiral.train.loop import train
from spiral.train.resume import named_checkpoints
from spiral.train.run_lock import run_lock
from spiral.train.setup import build_setup, check_run_folder, make_learner_factory
from spiral.train.stopping import stop_with_parent


def main(argv: Sequence[str]) -> int:
    stop_with_parent()  # started by `spiral seeds`: never outlive it
    args = list(argv)
    if any(a in ("-h", "--help", "help") for a in args):
        print(help_text(args))
        return 0
    try:
        cfg = parse_config(args)
        setup = build_setup(cfg)
        check_run_folder(setup.run_dir)  # before any model work (benchmarks skip it)
        if cfg.load_checkpoint_path:  # before the run folder is made
            named_checkpoints(cfg.load_checkpoint_path)
    except (ConfigError, KeyError) as err:
        print(f"spiral train: {err}", file=sys.stderr)
        return 2
    ranks = join_from_env()  # torchrun: this process's rank; else one process
    try:
        check_config(cfg, ranks)
    except ConfigError as err:
        if ranks.main:
            print(f"spiral train: {err}", file=sys.stderr)
        return 2
    setup = shared_setup(setup, ranks)
    # The folder is held before its console.log is opened: a second process refused
    # (RunFolderBusy) writes nothing there. The loop's own lock is this same hold.
    held = run_lock(setup.run_dir) if ranks.main else contextlib.nullcontext()
    kept = kept_in(setup.run_dir / "console.log") if ranks.main else contextlib.nullcontext()
    with held, kept, peers_watched(ranks):
        if ranks.main:
            kind = "fully sharded (FSDP)" if cfg.compute.fsdp else "data-parallel"
            world = f", {ranks.world} {kind} ranks" if ranks.world > 1 else ""
            per_step = (
                "every deal and move expanded each step (rollout=full_width)"
                if cfg.learning.rollout == "full_width"
                else f"{cfg.games_per_step} games/step"
            )
            print(
                f"run folder: {setup.run_dir}  ({cfg.num_steps} steps, "
                f"{per_step}{world}; console kept in console.log)"
            )
            print(compute_line(cfg))
        try:
            result = train(cfg, setup, make_learner_factory(cfg, ranks), ranks=ranks)
        except OSError as err:  # a full disk or read-only folder under a run file
            refused = run_write_refused(err, setup.run_dir)
            if refused is None:
                raise
            raise refused from err
        metrics_path = result.run_dir / "metrics.jsonl"
        if ranks.main and metrics_path.exists():
            print(format_before_after(read_jsonl(metrics_path)))
    leave(ranks)
    return 130 if result.interrupted else 0


def compute_line(cfg: TrainConfig) -> str:
    """Where the run computes and in which dtype, `dtype=auto` resolved (on a CPU, with
    what the probe found), so the console and console.log say what the run chose."""
    if cfg.compute.engine != "torch":
        return f"compute: engine {cfg.compute.engine}"
    from spiral.engines.loading import resolve_device, resolve_dtype

    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device, full_fine_tuning=cfg.lora_rank == 0)
    line = f"compute: {device.type}, dtype={cfg.dtype} -> {str(dtype).removeprefix('torch.')}"
    if device.type == "cpu":
        from spiral.engines.torch.cpu import describe

        line += f" ({describe()})"
    return line
