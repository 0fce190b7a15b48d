"""The reliability probe's second half: what a careless or hostile stranger does beyond
damaged checkpoints (`reliability_probe.py` runs these after its own cases).

- places a command writes: `export out=` over another model, a file or a path under
  /proc; `eval out=` a directory; `log_path=` an existing file or a name too long for the
  file system; a run whose `checkpoints/` or `metrics.jsonl` is something else;
- values: NaN and infinity for a float key, an integer beyond 2**63, a seeds range of
  billions;
- the outside world: an API opponent nobody answers; a terminal closed mid-run (SIGHUP);
- `spiral serve`: a 50 MB body with a small request right behind it;
- generated families: the property tests that generate values for every key of every
  command, damaged run folders, damaged weights and HTTP requests, run through pytest
  with the number of generated cases each tried.

Each case is judged as in `reliability_probe.py` (recovered / message / traceback /
silent wrong / undetected corruption / hang).
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
from probe_kit import ENV, SPIRAL, Outcome, fresh, judged, newest, run, train_args

REPO = Path(__file__).resolve().parents[1]


def _expect_refusal(argv: list[str], timeout: float = 300) -> Outcome:
    """A case where the only right answer is a one-line refusal."""
    return judged(*run(argv, timeout), lambda t: False, "silent wrong")


def export_cases(plain: Path, root: Path) -> dict[str, Outcome]:
    out: dict[str, Outcome] = {}
    step = sorted((plain / "checkpoints").glob("step_*"))[0]  # the adapter is the last's
    target = root / "cases" / "export-into-adapter"
    target.mkdir(parents=True)
    adapter = next(newest(plain).rglob("adapter_model.safetensors")).parent
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        (target / name).write_bytes((adapter / name).read_bytes())  # another step's adapter
    export = [*SPIRAL, "export", f"checkpoint={step}"]
    out["export: into a folder holding another model's adapter"] = _expect_refusal(
        [*export, f"out={target}"]
    )
    rc, text = run([*export, f"out={target}", "replace=true"])
    clean = not any(target.glob("adapter_*"))
    out["export: replace=true over that folder"] = judged(rc, text, lambda _: clean, "silent wrong")
    a_file = root / "cases" / "export-a-file"
    a_file.write_text("mine")
    out["export: out= an existing file"] = _expect_refusal([*export, f"out={a_file}"])
    out["export: out= under /proc"] = _expect_refusal([*export, "out=/proc/spiral-export"])
    return out


def write_place_cases(model: Path, plain: Path, root: Path) -> dict[str, Outcome]:
    out: dict[str, Outcome] = {}
    step = newest(plain)
    a_dir = root / "cases" / "eval-out-dir"
    a_dir.mkdir(parents=True)
    out["eval: out= a directory"] = _expect_refusal(
        [*SPIRAL, "eval", f"checkpoint={step}", "opponents=random", "games=2", f"out={a_dir}"]
    )
    a_file = root / "cases" / "log-path-file"
    a_file.write_text("not a folder")
    out["train: log_path= an existing file"] = _expect_refusal(train_args(model, a_file, 1))
    out["train: log_path= a 300-character name"] = _expect_refusal(
        train_args(model, root / "cases" / ("x" * 300), 1)
    )
    folder = fresh(plain, root, "checkpoints a file")
    ckpts = folder / "checkpoints"
    backup = folder / "checkpoints.moved"
    ckpts.rename(backup)
    ckpts.write_text("not a folder")
    out["resume: checkpoints/ replaced by a file"] = _expect_refusal(train_args(model, folder, 4))
    folder = fresh(plain, root, "metrics a dir")
    (folder / "metrics.jsonl").unlink()
    (folder / "metrics.jsonl").mkdir()
    out["resume: metrics.jsonl replaced by a directory"] = _expect_refusal(
        train_args(model, folder, 4)
    )
    folder = fresh(plain, root, "report retyped")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "env_ids": 7}))
    rc, text = run([*SPIRAL, "report", f"run={folder}"])
    made = any((folder / "report").glob("*.html")) or (folder / "report.html").is_file()
    said = "env_ids" in text  # drawn without the field, and saying so
    out["report: config.json with env_ids=7"] = judged(
        rc, text, lambda _: made and said, "silent wrong"
    )
    return out


def value_cases(model: Path, root: Path) -> dict[str, Outcome]:
    out: dict[str, Outcome] = {}
    for value in ("nan", "inf"):
        out[f"train: learning_rate={value}"] = _expect_refusal(
            train_args(model, root / "cases" / f"lr-{value}", 2, f"learning_rate={value}")
        )
    out["train: batch_size=2**70"] = _expect_refusal(
        train_args(model, root / "cases" / "huge-int", 2, f"batch_size={2**70}")
    )
    out["seeds: seeds=0-99999999999"] = _expect_refusal(
        [
            *SPIRAL,
            "seeds",
            "seeds=0-99999999999",
            f"out={root / 'cases' / 'seeds'}",
            "table_only=true",
        ],  # fmt: skip
        timeout=60,
    )
    return out


def outside_cases(model: Path, plain: Path, root: Path) -> dict[str, Outcome]:
    out: dict[str, Outcome] = {}
    step = newest(plain)
    out["eval: an API opponent nobody answers"] = _expect_refusal(
        [
            *SPIRAL,
            "eval",
            f"checkpoint={step}",
            "opponents=api:ghost",
            "games=2",
            "api_base_url=http://127.0.0.1:9/v1",
        ],  # fmt: skip
        timeout=300,
    )
    folder = root / "cases" / "sighup"
    proc = subprocess.Popen(train_args(model, folder, 500, "save_every=100"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=ENV)  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("step 2/"):
            break
    proc.send_signal(signal.SIGHUP)
    try:
        rest = proc.communicate(timeout=120)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        out["train: SIGHUP mid-run"] = Outcome("hang", "")
        return out
    saved = sorted((folder / "checkpoints").glob("step_*"))
    if "Traceback (most recent call last)" in rest:
        out["train: SIGHUP mid-run"] = Outcome("traceback", rest.strip().splitlines()[-1])
    elif saved:  # stopped like SIGTERM: the step finished and saved
        out["train: SIGHUP mid-run"] = Outcome("recovered", f"saved {saved[-1].name}")
    else:
        out["train: SIGHUP mid-run"] = Outcome("silent wrong", "ended without a checkpoint")
    return out


def serve_body_cases(model: Path) -> dict[str, Outcome]:
    from serve_load import big_body, free_port, start_server

    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(str(model), port, Path(tmp) / "serve.log")
        try:

            async def go() -> dict[str, Any]:
                base = f"http://127.0.0.1:{port}/v1"
                async with httpx.AsyncClient(base_url=base) as client:
                    return await big_body(client, 50)

            got = asyncio.run(go())
        finally:
            server.terminate()
            server.wait(timeout=30)
    fine = got["status"] == 413 and got["small_beside_status"] == 200
    said = (f"{got['status']} in {got['seconds']:.2f} s, the small request beside it "
            f"{got['small_beside_status']} in {got['small_beside_s']:.2f} s")  # fmt: skip
    return {"serve: a 50 MB body and a small request behind it": Outcome(
        "message" if fine else "silent wrong", said)}  # fmt: skip


GENERATED = {
    "every key of every command": "tests/test_cli_fuzz.py",
    "damaged run folders": "tests/report/test_damaged_runs.py",
    "damaged weights": "tests/engines/test_damaged_weights.py",
    "exports over what is already there": "tests/train/test_export_atomic.py",
    "HTTP requests": "tests/serving/test_server_fuzz.py",
    "request bodies over every OpenAI field": "tests/serving/test_server_fields.py",
    "guided choices of any text": "tests/serving/test_server_choice.py",
    "model folders whose config and weights disagree": "tests/engines/test_model_folder_mismatch.py",
    "game ids": "tests/games/test_unplayable_ids.py",
    "signal timings against spiral seeds": "tests/train/test_seeds_signals.py",
}
# Families whose generated test is slow (minutes), run by the probe all the same.
WITH_SLOW = {"signal timings against spiral seeds"}


def generated_cases() -> tuple[dict[str, Outcome], dict[str, int]]:
    """Run each generating test file; a family passes when its tests do. Returns the
    outcomes and how many generated cases each family tried."""
    out, counts = {}, {}
    for family, path in GENERATED.items():
        if not (REPO / path).is_file():
            continue
        marks = "not gpu" if family in WITH_SLOW else "not slow and not gpu"
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", marks,
               "--hypothesis-show-statistics", str(REPO / path)]  # fmt: skip
        rc, text = run(cmd, timeout=900)
        counts[family] = sum(int(n) for n in re.findall(r"(\d+) passing\b", text))
        kind = "hang" if rc is None else "recovered" if rc == 0 else "traceback"
        last = text.strip().splitlines()[-1] if text.strip() else ""
        out[f"generated: {family}"] = Outcome(kind, last)
    return out, counts
