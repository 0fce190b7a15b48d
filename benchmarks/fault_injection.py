"""Fault injection: kill a real `spiral train` process again and again, resume it each
time, and check that it ends exactly where an uninterrupted run ends.

A tiny model is made here; a reference run trains it uninterrupted. The faulty run is the
same command started over and over in a subprocess; each attempt is hit, at a random
moment, by SIGKILL, SIGTERM or SIGINT (some aimed at the moment a checkpoint is being
written: when `checkpoints/.tmp-*` appears). Between attempts the newest checkpoint is
sometimes damaged on purpose (truncated adapter, flipped bytes, deleted COMPLETE marker),
and resume must fall back to an intact one. At the end: the metrics (every stable key of
every row) and the final adapter weights must equal the reference, bit for bit for the
weights and to 1e-6 for the metrics.

Usage: `python benchmarks/fault_injection.py [--kills 20] [--steps 8] [--seed 0]
[--json PATH] [--workdir DIR]`. Prints a summary; exit 1 if anything differs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

VOLATILE = ("time", "time/", "perf/", "progress/done_frac")
SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT}


def train_args(model: Path, run: Path, steps: int) -> list[str]:
    return [
        f"model_name={model}",
        "env_ids=KuhnPokerSingle-v0,TicTacToe-v0",
        "batch_size=8",
        f"max_steps={steps}",
        "max_tokens=6",
        "lora_rank=4",
        "learning_rate=1e-2",
        "eval_every=2",
        "eval_games=2",
        "save_every=1",
        "template=chat",
        "answer_format=constrained",
        "weight_ema_decay=0.9",
        f"log_path={run}",
    ]


def launch(args: list[str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "spiral.cli", "train", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )


def stable_rows(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


def rows_equal(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> str:
    if len(a) != len(b):
        return f"{len(a)} rows vs {len(b)}"
    for ra, rb in zip(a, b, strict=True):
        if ra.keys() != rb.keys():
            return f"step {ra.get('step')}: keys differ"
        for key, va in ra.items():
            vb = rb[key]
            same = (
                math.isclose(va, vb, rel_tol=1e-6, abs_tol=1e-6)
                if isinstance(va, float)
                else va == vb
            )
            if not same:
                return f"step {ra.get('step')}: {key} {va} vs {vb}"
    return ""


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    index = [json.loads(x) for x in (run / "checkpoints" / "index.jsonl").read_text().splitlines()]
    folder = run / "checkpoints" / max(index, key=lambda r: r["step"])["path"]
    return load_file(str(folder / "learner" / "adapter_model.safetensors"))


def damage_newest(run: Path, rng: random.Random) -> str:
    folders = sorted((run / "checkpoints").glob("step_[0-9]*"))
    if len(folders) < 2:
        return ""
    newest = folders[-1]
    adapter = newest / "learner" / "adapter_model.safetensors"
    kind = rng.choice(["truncate", "flip", "marker"])
    if kind == "marker" and (newest / "COMPLETE").exists():
        (newest / "COMPLETE").unlink()
    elif kind == "truncate" and adapter.exists():
        adapter.write_bytes(adapter.read_bytes()[: adapter.stat().st_size // 2])
    elif kind == "flip" and adapter.exists():
        data = bytearray(adapter.read_bytes())
        data[-50] ^= 0xFF
        adapter.write_bytes(bytes(data))
    else:
        return ""
    return kind


def wait_for_checkpoint_write(run: Path, proc: subprocess.Popen[bytes], limit: float) -> bool:
    """True once a checkpoint write is in progress (a .tmp folder exists)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        if any((run / "checkpoints").glob(".tmp-step_*")):
            return True
        time.sleep(0.005)
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="spiral-faults-"))
    from spiral.testing import make_tiny_model

    model = make_tiny_model(work / "model")
    reference, faulty = work / "reference", work / "faulty"
    for run in (reference, faulty):
        shutil.rmtree(run, ignore_errors=True)
    t0 = time.monotonic()
    ref = launch(train_args(model, reference, args.steps))
    _, err = ref.communicate()
    if ref.returncode != 0:
        print(err.decode()[-2000:], file=sys.stderr)
        return 1
    reference_s = time.monotonic() - t0

    sent: dict[str, int] = dict.fromkeys(SIGNALS, 0)
    in_write = damaged = attempts = 0
    damage_kinds: list[str] = []
    while True:
        attempts += 1
        proc = launch(train_args(model, faulty, args.steps))
        kills_done = sum(sent.values())
        if kills_done < args.kills:
            name = rng.choice(list(SIGNALS))
            if rng.random() < 0.3 and wait_for_checkpoint_write(faulty, proc, reference_s * 2):
                in_write += 1
            else:
                time.sleep(rng.uniform(0.5, reference_s * 0.8))
            if proc.poll() is None:
                proc.send_signal(SIGNALS[name])
                sent[name] += 1
        _, err = proc.communicate()
        if proc.returncode == 0 and sum(sent.values()) >= args.kills:
            break
        if proc.returncode not in (0, 130, -signal.SIGKILL, -signal.SIGTERM, -signal.SIGINT):
            print(f"attempt {attempts} exited {proc.returncode}:\n{err.decode()[-3000:]}")
            return 1
        if rng.random() < 0.25:
            kind = damage_newest(faulty, rng)
            if kind:
                damaged += 1
                damage_kinds.append(kind)
        if attempts > 10 * args.kills + 10:
            print("gave up: the faulty run never finished")
            return 1

    metrics_diff = rows_equal(
        stable_rows(reference / "metrics.jsonl"), stable_rows(faulty / "metrics.jsonl")
    )
    wa, wb = final_weights(reference), final_weights(faulty)
    weights_equal = wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    leftovers = [p.name for p in (faulty / "checkpoints").iterdir() if p.name.startswith(".")]
    result = {
        "steps": args.steps,
        "attempts": attempts,
        "signals": sent,
        "signals_during_checkpoint_write": in_write,
        "damaged_checkpoints": damaged,
        "damage_kinds": sorted(set(damage_kinds)),
        "metrics_equal": not metrics_diff,
        "metrics_difference": metrics_diff,
        "final_weights_equal": weights_equal,
        "leftover_temporary_files": leftovers,
        "seconds": round(time.monotonic() - t0, 1),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if (not metrics_diff and weights_equal and not leftovers) else 1


if __name__ == "__main__":
    raise SystemExit(main())
