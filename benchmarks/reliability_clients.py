"""The reliability probe's cases of clients and damaged inputs: `spiral serve` as OpenAI
clients use it (streaming, fields it does not offer, choices spelled like special tokens,
a hang-up with requests in flight, weights that hold NaN), model folders whose config and
weights disagree, game ids that cannot be played, and `spiral seeds` under signals.
`reliability_probe.py` runs these after its own cases; each is judged as there
(recovered / message / traceback / silent wrong / hang).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from probe_kit import ENV, SPIRAL, Outcome, judged, nan_weights, run
from serve_load import free_port, start_server

USER = [{"role": "user", "content": "Your move."}]
REFUSED_FIELDS: dict[str, dict[str, Any]] = {
    "logprobs=true": {"logprobs": True},
    "response_format json_object": {"response_format": {"type": "json_object"}},
    "tools": {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
    "a misspelt field": {"temperture": 0.5},
    "stream_options without stream": {"stream_options": {"include_usage": True}},
    "an image content part": {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
                ],
            }
        ]
    },  # fmt: skip
    "an empty choice": {"guided_choice": ["", "a"]},
    "a choice listed twice": {"guided_choice": ["a", "a"]},
}


def _refusal(reply: httpx.Response, field: str) -> Outcome:
    """A 400 whose error names the field is a one-line refusal; anything else is not."""
    if reply.status_code >= 500:
        return Outcome("traceback", str(reply.status_code))
    if reply.status_code != 400:
        return Outcome("silent wrong", f"{reply.status_code}: {reply.text[:120]}")
    error = reply.json().get("error", {})
    named = field in json.dumps(error)
    return Outcome("message" if named else "silent wrong", error.get("message", "")[:150])


def _field_cases(base: str) -> dict[str, Outcome]:
    out = {}
    for name, extra in REFUSED_FIELDS.items():
        body = {"messages": USER, "max_tokens": 4, **extra}
        field = next(iter(extra)) if "messages" not in extra else "content"
        field = "guided_choice" if "guided_choice" in extra else field
        reply = httpx.post(f"{base}/chat/completions", json=body, timeout=60)
        out[f"serve: {name}"] = _refusal(reply, field)
    return out


def _choice_and_stream_cases(base: str) -> dict[str, Outcome]:
    from openai import OpenAI

    client = OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=120)
    choices = ["<|im_start|>", "<|endoftext|>"]
    reply = client.chat.completions.create(
        model="served",
        messages=USER,
        extra_body={"guided_choice": choices},  # type: ignore[arg-type]
    )
    text = reply.choices[0].message.content
    out = {"serve: choices spelled like special tokens": Outcome(
        "recovered" if text in choices else "silent wrong", repr(text))}  # fmt: skip
    request = {"model": "served", "messages": USER, "max_tokens": 24, "temperature": 0}
    whole = client.chat.completions.create(**request).choices[0].message.content  # type: ignore[call-overload]
    pieces, usage = [], None
    for chunk in client.chat.completions.create(
        **request, stream=True, stream_options={"include_usage": True}
    ):  # type: ignore[call-overload]
        pieces += [c.delta.content or "" for c in chunk.choices]
        usage = chunk.usage or usage
    same = "".join(pieces) == whole and usage is not None
    out["serve: a reply streamed through the openai client"] = Outcome(
        "recovered" if same else "silent wrong", f"{len(pieces)} chunks, usage {usage is not None}"
    )
    return out


def _hangup_case(server: subprocess.Popen[bytes], base: str) -> Outcome:
    """Five long requests in flight, then SIGHUP: each must be answered (200 or 503)."""
    got: list[Any] = []

    def ask() -> None:
        body = {"messages": USER, "max_tokens": 3000}
        try:
            got.append(httpx.post(f"{base}/chat/completions", json=body, timeout=120).status_code)
        except httpx.HTTPError as err:
            got.append(type(err).__name__)

    clients = [threading.Thread(target=ask) for _ in range(5)]
    for c in clients:
        c.start()
    time.sleep(1.5)
    server.send_signal(signal.SIGHUP)
    for c in clients:
        c.join(timeout=60)
    try:
        ended = server.wait(timeout=60) is not None
    except subprocess.TimeoutExpired:
        return Outcome("hang", f"answers {got}; the server still runs 60 s after SIGHUP")
    answered = all(g in (200, 503) for g in got) and len(got) == 5
    return Outcome("message" if answered and ended else "silent wrong", f"answers {got}")


@contextlib.contextmanager
def _hangups_delivered() -> Iterator[None]:
    """SIGHUP at its default while a process is started: a probe run under nohup would
    otherwise pass its ignored SIGHUP on, and the case is a hang-up as a closing terminal
    delivers it."""
    kept = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, kept)


def serve_client_cases(model: Path) -> dict[str, Outcome]:
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "serve.log"
        with _hangups_delivered():
            server = start_server(str(model), port, log, limit=4000)
        try:
            out = _field_cases(base) | _choice_and_stream_cases(base)
            out["serve: SIGHUP with requests in flight"] = _hangup_case(server, base)
        finally:
            if server.poll() is None:
                server.kill()
            server.wait(timeout=30)
        tracebacks = log.read_text(errors="replace").count("Traceback")
    if tracebacks:
        out["serve: the server's log"] = Outcome("traceback", f"{tracebacks} tracebacks")
    return out


def serve_nan_case(model: Path, root: Path) -> dict[str, Outcome]:
    """`spiral serve` over weights that hold NaN: refused before it listens."""
    broken = root / "cases" / "serve-nan-model"
    shutil.copytree(model, broken)
    nan_weights(broken / "model.safetensors")
    cmd = [*SPIRAL, "serve", f"checkpoint={broken}", f"port={free_port()}", "device=cpu"]
    rc, text = run(cmd, timeout=300)
    return {"serve: weights that hold NaN": judged(rc, text, lambda t: False, "silent wrong")}


def _refused(cmd: list[str], env: dict[str, str] | None = None) -> Outcome:
    """A command that must stop in one line (exit != 0, no traceback)."""
    rc, text = run(cmd, timeout=300) if env is None else _run_with(cmd, env)
    return judged(rc, text, lambda t: False, "silent wrong")


def _run_with(cmd: list[str], env: dict[str, str]) -> tuple[int | None, str]:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env={**ENV, **env}, timeout=300)
    except subprocess.TimeoutExpired:
        return None, ""
    return done.returncode, done.stdout + done.stderr


def _edited_config(model: Path, root: Path, name: str, **changes: Any) -> Path:
    folder = root / "cases" / name
    shutil.copytree(model, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))
    return folder


def model_folder_cases(model: Path, root: Path) -> dict[str, Outcome]:
    """Model folders whose config, weights or tokenizer disagree: refused in one line."""
    from spiral.testing import make_tiny_model

    eval_on = [*SPIRAL, "eval", "opponents=random", "games=1", "env_ids=KuhnPokerSingle-v0"]
    fewer = _edited_config(model, root, "model-fewer-layers", num_hidden_layers=1)
    short = _edited_config(model, root, "model-short-context", max_position_embeddings=16)
    small = make_tiny_model(root / "cases" / "model-small-vocabulary", vocab_size=260)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(model / name, small / name)
    train = [*SPIRAL, "train", f"model_name={fewer}", "env_ids=KuhnPokerSingle-v0",
             "batch_size=4", "max_steps=1", f"log_path={root / 'cases' / 'run-fewer-layers'}"]  # fmt: skip
    return {
        "model: config declares fewer layers than the weights (eval)": _refused(
            [*eval_on, f"checkpoint={fewer}"]
        ),
        "model: config declares fewer layers than the weights (train)": _refused(train),
        "model: tokenizer larger than the embedding": _refused([*eval_on, f"checkpoint={small}"]),
        "model: a context shorter than the prompt": _refused([*eval_on, f"checkpoint={short}"]),
    }


UNPLAYABLE = ("openspiel:catch", "openspiel:goofspiel", "openspiel:kuhn_poker(players=3)",
              "openspiel:no_such_game", "openspiel:tic_tac_töe", "textarena:NoSuchGame-v0")  # fmt: skip


def game_id_cases(model: Path) -> dict[str, Outcome]:
    """Game ids that cannot be played: one line before the model loads."""
    return {
        f"game id: {game}": _refused(
            [
                *SPIRAL,
                "eval",
                f"checkpoint={model}",
                "opponents=random",
                "games=1",
                f"env_ids={game}",
            ]
        )
        for game in UNPLAYABLE
    }


def outside_world_cases(model: Path, root: Path) -> dict[str, Outcome]:
    """No network for a hub id, unusable caches, stdout on a full device, a run folder
    whose name is not UTF-8."""
    closed = free_port()  # bound and released: nothing listens there
    offline = {"HF_ENDPOINT": f"http://127.0.0.1:{closed}", "HF_HOME": str(root / "hf-empty")}
    a_file = root / "cases" / "a-file"
    a_file.parent.mkdir(parents=True, exist_ok=True)
    a_file.write_text("not a folder")
    hub_eval = [*SPIRAL, "eval", "checkpoint=Qwen/Qwen3-0.6B", "opponents=random", "games=1"]
    out = {
        "hub id with no network": _refused(hub_eval, offline),
        "HF_HOME is a file": _refused(hub_eval, {"HF_HOME": str(a_file)}),
        "SPIRAL_CACHE is a file": _refused(
            [*SPIRAL, "eval", "checkpoint=embedded", "opponents=random", "games=1"],
            {"SPIRAL_CACHE": str(a_file)},
        ),
    }
    report = root / "cases" / "eval-full-stdout.json"
    cmd = [*SPIRAL, "eval", f"checkpoint={model}", "opponents=random", "games=2",
           "env_ids=KuhnPokerSingle-v0", f"out={report}"]  # fmt: skip
    with open("/dev/full", "w") as full:
        done = subprocess.run(cmd, stdout=full, stderr=subprocess.PIPE, text=True, env=ENV)
    kept = done.returncode == 0 and report.is_file() and "Traceback" not in done.stderr
    out["eval with stdout on a full device"] = Outcome(
        "recovered" if kept else "traceback" if "Traceback" in done.stderr else "silent wrong",
        done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "",
    )
    bad_name = os.fsdecode(bytes(root / "cases") + b"/run-\xff")
    train = [*SPIRAL, "train", f"model_name={model}", "env_ids=KuhnPokerSingle-v0",
             "batch_size=4", "max_steps=1", f"log_path={bad_name}"]  # fmt: skip
    out["train into a folder whose name is not UTF-8"] = _refused(train)
    return out


def _processes_in(folder: Path) -> list[int]:
    """The processes whose command line names `folder` (a sweep's runs are given their
    seed folders inside it), from /proc."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                words = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(os.fsencode(folder) in word for word in words):
                found.append(int(proc.name))
    return found


def seeds_signal_cases(model: Path, root: Path) -> dict[str, Outcome]:
    """Ctrl-C, SIGTERM and SIGHUP to `spiral seeds` mid-run: no child outlives it, and the
    same command then finishes every seed."""
    from probe_kit import train_args

    out = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        folder = root / "cases" / f"seeds-{sig.name}"
        keys = train_args(model, folder, 6)[len(SPIRAL) + 1 :]
        keys = [k for k in keys if not k.startswith("log_path=")]
        cmd = [*SPIRAL, "seeds", "seeds=0-1", f"out={folder}", *keys]
        with _hangups_delivered():
            sweep = subprocess.Popen(
                cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not list(folder.glob("seed0/checkpoints/step_*")):
            time.sleep(0.5)
        sweep.send_signal(sig)
        try:
            sweep.wait(timeout=120)
        except subprocess.TimeoutExpired:
            sweep.kill()
            out[f"seeds: {sig.name} mid-run"] = Outcome("hang", "")
            continue
        time.sleep(1)
        left = _processes_in(folder)
        rc, text = run(cmd, timeout=600)
        finished = rc == 0 and all((folder / f"seed{s}" / "checkpoints").is_dir() for s in (0, 1))
        if left:
            out[f"seeds: {sig.name} mid-run"] = Outcome("silent wrong", f"left running: {left}")
        else:
            out[f"seeds: {sig.name} mid-run"] = Outcome(
                "recovered" if finished else judged(rc, text, lambda t: False, "silent wrong").kind,
                text.strip().splitlines()[-1] if text.strip() else "",
            )
    return out


def every_case(model: Path, root: Path) -> dict[str, Outcome]:
    """Every case of this family, in the probe's scratch folder `root`."""
    cases = serve_client_cases(model) | serve_nan_case(model, root)
    cases |= model_folder_cases(model, root) | game_id_cases(model)
    cases |= outside_world_cases(model, root) | seeds_signal_cases(model, root)
    return cases


def main() -> int:
    """Run this family alone: `python benchmarks/reliability_clients.py`."""
    from spiral.testing import make_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = make_tiny_model(root / "model")
        cases = every_case(model, root)
    for name, o in cases.items():
        print(f"{o.kind:<14} {name}  | {o.said[:140]}")
    return 0 if all(o.kind in ("recovered", "message") for o in cases.values()) else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
