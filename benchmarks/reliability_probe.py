"""Probe Spiral as a hostile user and a chaos tester would: every damaged file, hostile
folder, bad request and lost process that `docs/reliability.md` lists, run through the
real commands (`spiral train/eval/report/serve` in subprocesses, tiny local models), each
outcome sorted into one of:

- recovered: the command did the right thing and went on (a fallback, a kept row);
- message: the command refused in one line that says what to do (exit status != 0, or
  a 4xx/503 from the server);
- traceback: a Python traceback reached the user;
- silent wrong: exit 0 on input that should have been refused or repaired;
- undetected corruption: exit 0 having used damaged weights;
- hang: no answer within the case's time limit.

The first two are the only acceptable ones; the script exits 1 if any case lands
elsewhere. Usage: `python benchmarks/reliability_probe.py [--json PATH] [--no-processes]`
(`--no-processes` leaves out the torchrun and Ray cases, about half the time;
`--no-generated` the property-test families). `reliability_strangers.py` holds the cases
of careless and hostile strangers: the places commands write, values, the outside world,
a huge request body, and the generated families with the count of cases each tried;
`reliability_clients.py` those of OpenAI clients of `spiral serve`, damaged model folders,
game ids that cannot be played, a missing network, full devices and signals to
`spiral seeds`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_kit import (  # noqa: E402  (the scripts beside it, however this file is loaded)
    ENV,
    GOOD,
    POPULATION,
    SPIRAL,
    WORKDIR,
    Outcome,
    flip,
    fresh,
    judged,
    make_runs,
    nan_weights,
    newest,
    run,
    train_args,
    truncate,
)

ADAPTER = "learner/adapter_model.safetensors"
CHECKPOINT_DAMAGE: dict[str, Callable[[Path], None]] = {
    "manifest deleted, adapter byte flipped": lambda c: (
        flip(c / ADAPTER), (c / "MANIFEST.json").unlink()),
    "manifest deleted, optimizer byte flipped": lambda c: (
        flip(c / "learner/optimizer.safetensors"), (c / "MANIFEST.json").unlink()),
    "manifest deleted, adapter truncated": lambda c: (
        truncate(c / ADAPTER), (c / "MANIFEST.json").unlink()),
    "manifest deleted, adapter_config.json not JSON": lambda c: (
        (c / "learner/adapter_config.json").write_text("{"), (c / "MANIFEST.json").unlink()),
    "manifest deleted, adapter_config.json a list": lambda c: (
        (c / "learner/adapter_config.json").write_text("[]"), (c / "MANIFEST.json").unlink()),
    "manifest deleted, loop_state.json not JSON": lambda c: (
        (c / "loop_state.json").write_text("{"), (c / "MANIFEST.json").unlink()),
    "manifest deleted, adapter deleted": lambda c: (
        (c / ADAPTER).unlink(), (c / "MANIFEST.json").unlink()),
    "manifest rewritten, adapter byte flipped": lambda c: (flip(c / ADAPTER), _rewrite(c)),
}  # fmt: skip


def _rewrite(folder: Path) -> None:
    from spiral.checkpoints.manifest import write_manifest

    write_manifest(folder)


def resume_cases(model: Path, plain: Path, root: Path) -> dict[str, Outcome]:
    out = {}
    for name, damage in CHECKPOINT_DAMAGE.items():
        folder = fresh(plain, root, f"resume {name}")
        damage(newest(folder))
        rc, text = run(train_args(model, folder, 4))
        out[f"resume: {name}"] = judged(
            rc, text, lambda t: "skipping damaged checkpoint" in t, "undetected corruption"
        )
    return out


def eval_cases(plain: Path, root: Path) -> dict[str, Outcome]:
    out = {}
    for name, damage in CHECKPOINT_DAMAGE.items():
        folder = fresh(plain, root, f"eval {name}")
        step = newest(folder)
        damage(step)
        cmd = [*SPIRAL, "eval", f"checkpoint={step}", "opponents=random", "games=1"]
        out[f"eval: {name}"] = judged(*run(cmd), lambda t: False, "undetected corruption")
    return out


MEMBER_DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated": lambda m: truncate(m / "adapter_model.safetensors"),
    "deleted": lambda m: shutil.rmtree(m),
    "holding NaN": lambda m: nan_weights(m / "adapter_model.safetensors"),
    "a byte flipped": lambda m: flip(m / "adapter_model.safetensors"),
}


def pool_cases(model: Path, population: Path, root: Path) -> dict[str, Outcome]:
    out = {}
    for name, damage in MEMBER_DAMAGE.items():
        folder = fresh(population, root, f"pool {name}")
        members = sorted(p for p in (folder / "pool").glob("step_*") if p.is_dir())
        damage(members[-1])
        rc, text = run(train_args(model, folder, 4, *POPULATION))
        ok = members[-1].name in text.strip().splitlines()[-1] if text.strip() else False
        result = judged(rc, text, lambda t: False, "undetected corruption")
        if result.kind == "message" and not ok:
            result = Outcome("silent wrong", result.said)  # refused, but not naming the member
        out[f"resume: pool member {name}"] = result
    return out


def metrics_cases(model: Path, plain: Path, root: Path) -> dict[str, Outcome]:
    out = {}
    folder = fresh(plain, root, "metrics no newline")
    path = folder / "metrics.jsonl"
    path.write_text(path.read_text().rstrip("\n"))
    rc, text = run(train_args(model, folder, 4))

    def kept(_: str) -> bool:
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        steps = [r["step"] for r in rows if "train/overall/num_games" in r]
        return steps == sorted(set(steps)) and len(steps) == 4

    out["resume: last metrics row without its newline"] = judged(rc, text, kept, "silent wrong")
    folder = fresh(plain, root, "metrics torn middle")
    path = folder / "metrics.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = lines[1][: len(lines[1]) // 2]
    path.write_text("\n".join(lines) + "\n")
    out["resume: torn middle metrics row"] = judged(
        *run(train_args(model, folder, 4)), lambda t: False, "silent wrong"
    )
    return out


def report_cases(plain: Path, population: Path, root: Path) -> dict[str, Outcome]:
    def edit_metrics(change: Callable[[list[str]], list[str]]) -> Callable[[Path], None]:
        def apply(folder: Path) -> None:
            path = folder / "metrics.jsonl"
            path.write_bytes("\n".join(change(path.read_text().splitlines())).encode() + b"\n")

        return apply

    def non_utf8(folder: Path) -> None:
        path = folder / "metrics.jsonl"
        lines = path.read_bytes().splitlines()
        path.write_bytes(
            b"\n".join([lines[0], b'{"step": 1, "x": "\xff\xfe"}', *lines[1:]]) + b"\n"
        )

    def league(folder: Path) -> None:
        (folder / "league.json").write_text('{"ratings": {"a": {}, "b": {"mu": 1}}}')

    shapes: dict[str, tuple[Path, Callable[[Path], None]]] = {
        "config.json a JSON list": (plain, lambda f: (f / "config.json").write_text("[1, 2]")),
        "a null value": (plain, edit_metrics(lambda ls: [*ls, '{"step": 9, "eval/x": null}'])),
        "league.json missing fields": (population, league),
        "a non-numeric step": (plain, edit_metrics(lambda ls: [ls[0], '{"step": "two"}', *ls[1:]])),
        "a string value": (plain, edit_metrics(lambda ls: [*ls, '{"step": 9, "train/loss": "x"}'])),
        "a non-UTF-8 row": (plain, non_utf8),
        "a torn middle line": (plain, edit_metrics(lambda ls: [ls[0], ls[1][:9], *ls[2:]])),
    }  # fmt: skip
    out = {}
    for name, (src, damage) in shapes.items():
        folder = fresh(src, root, f"report {name}")
        damage(folder)
        rc, text = run([*SPIRAL, "report", f"run={folder}"])
        made = (folder / "report.html").is_file() or "report" in text
        out[f"report: {name}"] = judged(rc, text, lambda t, made=made: made, "silent wrong")
    return out


def before_first_save_cases(model: Path, root: Path) -> dict[str, Outcome]:
    folder = root / "cases" / "unsaved"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_name": str(model)}))
    (folder / "metrics.jsonl").write_text("")
    out = {}
    for cmd in ("eval", "serve"):
        argv = [*SPIRAL, cmd, f"checkpoint={folder}"] + (["games=1"] if cmd == "eval" else [])
        out[f"{cmd}: a run before its first save"] = judged(
            *run(argv, timeout=120), lambda t: False, "silent wrong"
        )
    return out


def hostile_folder_cases(model: Path, plain: Path, root: Path) -> dict[str, Outcome]:
    def pickled(name: str, instead: str) -> Callable[[Path], None]:
        def apply(f: Path) -> None:
            (f / instead).unlink()  # the safetensors file the pickle takes the place of
            (f / name).write_bytes(b"\x80\x04not really a pickle")

        return apply

    def auto_map(name: str) -> Callable[[Path], None]:
        def apply(f: Path) -> None:
            path = f / name
            data = json.loads(path.read_text()) if path.is_file() else {}
            data["auto_map"] = {"AutoModelForCausalLM": "evil.Model"}
            path.write_text(json.dumps(data))

        return apply

    def escaping_template(f: Path) -> None:
        path = f / "chat_template.jinja"
        path.write_text(
            "{{ cycler.__init__.__globals__.os.popen('id').read() }}" + path.read_text()
        )

    adapter = newest(plain) / "learner"  # a trained adapter, with optimizer.safetensors
    shapes = {
        "pickle pytorch_model.bin": (model, pickled("pytorch_model.bin", "model.safetensors")),
        "pickle adapter_model.bin": (
            adapter, pickled("adapter_model.bin", "adapter_model.safetensors")),
        "auto_map in config.json": (model, auto_map("config.json")),
        "auto_map in tokenizer_config.json": (model, auto_map("tokenizer_config.json")),
        "auto_map in adapter_config.json": (adapter, auto_map("adapter_config.json")),
        "a chat template escaping Jinja's sandbox": (model, escaping_template),
    }  # fmt: skip
    out = {}
    for name, (src, damage) in shapes.items():
        folder = fresh(src, root, f"hostile {name}")
        damage(folder)
        for cmd in ("eval", "train"):
            if cmd == "eval":
                argv = [*SPIRAL, "eval", f"checkpoint={folder}", "opponents=random", "games=1"]
            else:
                argv = train_args(folder, root / "cases" / f"trained-{folder.name}", 1)
            out[f"{cmd}: {name}"] = judged(*run(argv), lambda t: False, "silent wrong")
    return out


def run_folder_cases(model: Path, plain: Path, root: Path) -> dict[str, Outcome]:
    out = {}
    folder = fresh(plain, root, "two runs")
    first = subprocess.Popen(train_args(model, folder, 500), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env=ENV)  # fmt: skip
    try:
        assert first.stdout is not None
        for line in first.stdout:
            if line.startswith("step "):
                break
        rc, text = run(train_args(model, folder, 600))
        out["train: a second process on the same run folder"] = judged(
            rc, text, lambda t: False, "silent wrong"
        )
    finally:
        first.send_signal(signal.SIGINT)
        first.wait(timeout=120)
    folder = fresh(plain, root, "index outside")
    outside = fresh(plain, root, "foreign")
    index = folder / "checkpoints" / "index.jsonl"
    row = {"step": 3, "path": str(newest(outside)), "time": time.time(), "final": False}
    with index.open("a") as fh:
        fh.write(json.dumps({**row, "step": 7}) + "\n")
    rc, text = run(train_args(model, folder, 4))
    used = "at step 7" in text or str(outside) in text
    out["resume: an index row pointing outside the run"] = judged(
        rc, text, lambda t: not used, "undetected corruption"
    )
    return out


# ---- the server ------------------------------------------------------------------------


def serve_cases(model: Path) -> dict[str, Outcome]:
    from benchmarks.serve_load import HOSTILE, free_port, post, start_server

    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(str(model), port, Path(tmp) / "serve.log", limit=4000)
        base = f"http://127.0.0.1:{port}/v1"
        out = {}
        try:
            import asyncio

            async def ask(body: Any) -> int:
                async with httpx.AsyncClient(base_url=base) as client:
                    return await post(client, body, timeout=60)

            for name in ("long guided_choice", "lone surrogate", "surrogate in a choice"):
                status = asyncio.run(ask(HOSTILE[name]))
                kind = (
                    "message"
                    if 400 <= status < 500
                    else "traceback"
                    if status >= 500
                    else "silent wrong"
                )
                out[f"serve: {name}"] = Outcome(kind, str(status))
            part = b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\ud800"}]}]}'
            status = asyncio.run(ask(part))
            out["serve: lone surrogate in a content part"] = Outcome(
                "message" if status == 400 else "traceback", str(status)
            )
            got: list[Any] = []
            body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4000}

            def call() -> None:
                try:
                    got.append(asyncio.run(ask(body)))
                except httpx.HTTPError as err:
                    got.append(err)

            client = threading.Thread(target=call)
            client.start()
            time.sleep(0.5)
            server.send_signal(signal.SIGTERM)
            client.join(timeout=30)
            answer = got[0] if got else None
            if answer == 503:
                out["serve: SIGTERM during a request"] = Outcome("message", "503")
            elif answer == 200:
                out["serve: SIGTERM during a request"] = Outcome(
                    "recovered", "200 (finished in time)"
                )
            else:
                out["serve: SIGTERM during a request"] = Outcome("silent wrong", repr(answer))
        finally:
            with contextlib.suppress(Exception):
                server.kill()
            server.wait(timeout=30)
        tracebacks = (Path(tmp) / "serve.log").read_text(errors="replace").count("Traceback")
    if tracebacks:
        out["serve: the server's log"] = Outcome("traceback", f"{tracebacks} tracebacks")
    return out


# ---- many processes --------------------------------------------------------------------


def process_cases(model: Path, root: Path) -> dict[str, Outcome]:
    """The torchrun and Ray cases, as the tests run them (tests/train/)."""
    tests = {
        "torchrun: a rank killed": "tests/train/test_data_parallel.py::"
        "test_a_killed_rank_is_summarised_in_one_line_by_the_survivor",
        "ray: listens on loopback only": "tests/train/test_async_processes.py::"
        "test_the_local_ray_instance_listens_on_loopback_only",
        "ray: gcs_server dies, the run ends": "tests/train/test_async_processes.py::"
        "test_a_run_that_ends_after_its_gcs_died_leaves_no_ray_process",
        "ray: the driver killed": "tests/train/test_async_processes.py::"
        "test_a_killed_driver_leaves_no_ray_process",
    }
    out = {}
    repo = Path(__file__).resolve().parents[1]
    for name, test in tests.items():
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(repo / test)]
        rc, text = run(cmd, timeout=600)
        kind = "hang" if rc is None else "recovered" if rc == 0 else "silent wrong"
        out[name] = Outcome(kind, text.strip().splitlines()[-1] if text.strip() else "")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default="")
    parser.add_argument("--no-processes", action="store_true")
    parser.add_argument("--no-generated", action="store_true")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import reliability_clients as clients
    import reliability_strangers as strangers

    generated: dict[str, int] = {}
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        WORKDIR.append(root)
        model, plain, population = make_runs(root)
        cases: dict[str, Outcome] = {}
        cases |= resume_cases(model, plain, root)
        cases |= eval_cases(plain, root)
        cases |= pool_cases(model, population, root)
        cases |= metrics_cases(model, plain, root)
        cases |= report_cases(plain, population, root)
        cases |= before_first_save_cases(model, root)
        cases |= hostile_folder_cases(model, plain, root)
        cases |= run_folder_cases(model, plain, root)
        cases |= serve_cases(model)
        if not args.no_processes:
            cases |= process_cases(model, root)
        cases |= strangers.export_cases(plain, root)
        cases |= strangers.write_place_cases(model, plain, root)
        cases |= strangers.value_cases(model, root)
        cases |= strangers.outside_cases(model, plain, root)
        cases |= strangers.serve_body_cases(model)
        cases |= clients.every_case(model, root)
        if not args.no_generated:
            found, generated = strangers.generated_cases()
            cases |= found
    tally = Counter(o.kind for o in cases.values())
    for name, outcome in cases.items():
        mark = "ok " if outcome.kind in GOOD else "BAD"
        print(f"{mark} {outcome.kind:<22} {name}  | {outcome.said[:150]}")
    result = {
        "cases": len(cases),
        "tally": dict(sorted(tally.items())),
        "seconds": round(time.monotonic() - start),
        "generated_cases_tried": generated,
        "outcomes": {n: {"kind": o.kind, "said": o.said[:300]} for n, o in cases.items()},
    }
    print(json.dumps(result["tally"]))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if set(tally) <= set(GOOD) else 1


if __name__ == "__main__":
    raise SystemExit(main())
