"""What every family of the reliability probe shares: how a command is run in the probe's
scratch folder, how its outcome is judged, the small run folders the cases damage, and
the damage itself. `reliability_probe.py` runs the families; `reliability_strangers.py`
and `reliability_clients.py` add theirs. Nothing here runs on its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

GOOD = ("recovered", "message")
BIN = Path(sys.executable).parent
SPIRAL = [sys.executable, "-m", "spiral.cli"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@dataclass(frozen=True)
class Outcome:
    kind: str
    said: str  # the last line the user saw, or the status


WORKDIR: list[Path] = []  # where the commands run (the probe's scratch folder), once set


def run(cmd: list[str], timeout: float = 300) -> tuple[int | None, str]:
    """`cmd` in the probe's scratch folder (so reports an evaluation writes to its working
    directory land there, not in the caller's), with its exit code and output."""
    cwd = WORKDIR[-1] if WORKDIR else None
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, env=ENV, timeout=timeout, cwd=cwd
        )
    except subprocess.TimeoutExpired:
        return None, ""
    return done.returncode, done.stdout + done.stderr


def judged(rc: int | None, text: str, ok: Callable[[str], bool], on_exit_0: str) -> Outcome:
    """The usual judgement: a hang, a traceback, a one-line refusal, or exit 0 (then `ok`
    says whether what happened was right, else it is `on_exit_0`)."""
    last = text.strip().splitlines()[-1] if text.strip() else ""
    if rc is None:
        return Outcome("hang", "")
    if "Traceback (most recent call last)" in text:
        return Outcome("traceback", last)
    if rc != 0:
        return Outcome("message", last)
    return Outcome("recovered" if ok(text) else on_exit_0, last)


# ---- the run folders the cases damage ----------------------------------------------------


def train_args(model: Path, run: Path, steps: int, *extra: str) -> list[str]:
    return [*SPIRAL, "train", f"model_name={model}", "env_ids=KuhnPokerSingle-v0",
            "answer_format=constrained", "batch_size=4", "max_tokens=6", "lora_rank=4",
            "eval_every=0", "save_every=1", "template=chat", f"log_path={run}",
            f"max_steps={steps}", *extra]  # fmt: skip


POPULATION = ("fsp_enabled=true", "fsp_update_interval=1", "fsp_fixed_opponents=random")


def make_runs(root: Path) -> tuple[Path, Path, Path]:
    from spiral.testing import make_tiny_model

    model = make_tiny_model(root / "model")
    for name, extra in (("plain", ()), ("population", POPULATION)):
        rc, text = run(train_args(model, root / name, 3, *extra))
        if rc != 0:
            raise SystemExit(f"the {name} run failed:\n{text[-3000:]}")
    return model, root / "plain", root / "population"


def fresh(src: Path, root: Path, name: str) -> Path:
    dst = root / "cases" / name.replace(" ", "-").replace("/", "-")
    shutil.copytree(src, dst)
    return dst


# ---- damage --------------------------------------------------------------------------------


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def nan_weights(path: Path) -> None:
    tensors = load_file(str(path))
    name = next(iter(tensors))
    tensors[name] = torch.full_like(tensors[name], float("nan"))
    save_file(tensors, str(path))


def newest(run_dir: Path) -> Path:
    return sorted((run_dir / "checkpoints").glob("step_*"))[-1]
