"""Tests of the evaluation CLI: API agent, `spiral serve`, `spiral eval` and run comparison.

Shared helpers: a live uvicorn server in a thread on a free 127.0.0.1 port, a plain
chat-completions server that drops connections before it answers, and a checkpoint
folder written the way the trainer writes one.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running_server(app: Any) -> Iterator[str]:
    """Serve `app` with uvicorn in a thread; yields its base URL (".../v1")."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(500):  # bounded wait for startup (at most ~10 s)
        if server.started:
            break
        time.sleep(0.02)
    else:
        server.should_exit = True
        raise RuntimeError("uvicorn did not start within 10 s")
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class _ChatHandler(BaseHTTPRequestHandler):
    """Closes the connection of the first `server.drops` requests without a word (a
    transport error for the client), then answers each with `server.reply`."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        server: Any = self.server
        self.rfile.read(int(self.headers.get("content-length", 0)))
        server.requests += 1
        if server.requests <= server.drops:
            self.close_connection = True
            return
        data = json.dumps({"choices": [{"message": {"content": server.reply}}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        del format, args  # keep test output clean


@contextlib.contextmanager
def chat_server(reply: str, drops: int = 0) -> Iterator[Any]:
    """A real chat-completions endpoint on 127.0.0.1 (`.url`, `.requests` counted)."""
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _ChatHandler)
    server.reply, server.drops, server.requests = reply, drops, 0
    server.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@functools.cache
def tiny_model_dir() -> Path:
    """One tiny real model per test process (training its tokenizer takes seconds)."""
    from spiral.testing import make_tiny_model

    folder = Path(tempfile.mkdtemp(prefix="spiral-eval-cli-"))
    atexit.register(shutil.rmtree, folder, True)
    return make_tiny_model(folder / "model")


def write_checkpoint(run_dir: Path, step: int, seed: int = 0, **config: Any) -> Path:
    """A checkpoint folder as the trainer writes it: learner/ (a LoRA adapter over the tiny
    model, weights perturbed by `seed`), loop_state.json with the run config, COMPLETE,
    and a row in checkpoints/index.jsonl."""
    import torch

    from spiral.engines.loading import ModelConfig
    from spiral.engines.torch.learner import TorchLearner
    from spiral.train.checkpoint import LoopState, save_checkpoint

    learner = TorchLearner(ModelConfig(model=str(tiny_model_dir()), lora_rank=4, device="cpu"))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # a different adapter per checkpoint, so steps really differ
        for name, param in learner.model.named_parameters():
            if "lora_B" in name:
                param.add_(0.05 * torch.randn(param.shape, generator=generator))
    run_config = {
        "model_name": str(tiny_model_dir()),
        "lora_rank": 4,
        "template": "chat",
        "answer_format": "bracket",
        "max_tokens": 6,
        "temperature": 1.0,
        "eval_temperature": 1.0,
        "env_ids": ["TicTacToe-v0"],
        **config,
    }
    state = LoopState(step=step, baselines={}, config=run_config, extra={})
    (run_dir / "config.json").write_text(json.dumps(run_config), encoding="utf-8")
    return save_checkpoint(run_dir / "checkpoints", state, learner.save)


def snapshot_tree(root: Path, leave_out: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """Every path under `root` but those in `leave_out` (and under them): a file's bytes,
    a link's target, "dir" for a folder; equal snapshots mean nothing was changed."""
    found: dict[str, Any] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if any(key == gone or key.startswith(gone + "/") for gone in leave_out):
            continue
        if path.is_symlink():
            found[key] = "-> " + os.readlink(path)
        elif path.is_dir():
            found[key] = "dir"
        else:
            found[key] = path.read_bytes()
    return found
