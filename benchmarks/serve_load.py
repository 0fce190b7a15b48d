"""Load `spiral serve` with a mix of hostile and valid requests, on localhost, for a
bounded time, and report what it answered and how long a small valid request waited.

The server is the real command (`spiral serve checkpoint=MODEL`) in a subprocess on
127.0.0.1. `--clients` concurrent clients loop over request kinds drawn at random:
hostile ones (a 5,000-word `guided_choice`, a lone surrogate, `max_tokens` far above the
limit, a prompt longer than the context, malformed JSON, `n=2`, `guided_regex`, and a
client that leaves mid-generation) and valid ones (a 64-token reply). Beside them, one
probe client sends a small valid request (4 tokens, greedy) after another and times it.
Before the load starts the probe is timed alone, so the report gives the small request's
p50/p99 idle and under load, on the same server in the same run. After the load, one
`--big-body-mb` body (default 50 MB) is sent with a small request 0.2 s behind it: each
one's status and time.

`--long-clients N` adds N clients that each ask for one long reply (`--long-tokens`,
default 256, temperature 1) after another: with more of them than the running batch
holds (16), they show whether a short request waits for a long reply. `--trees
NAME=DIR ...` runs the whole benchmark once per source tree (the server started from
DIR, e.g. a copy of the code before a change) and reports them side by side. Every
small request's time is kept (`each`), not only the percentiles.

What must hold (the script exits 1 otherwise): every hostile request gets a 4xx (the
leaver excepted: it is gone), every valid one a 200, no 5xx, and the server is still
alive and answering at the end.

Usage: `python benchmarks/serve_load.py [--model PATH] [--seconds 60] [--clients 8]
[--long-clients 0] [--trees NAME=DIR ...] [--json PATH]`; without `--model` a tiny
random model is made in a temporary folder (no download). A benchmark, not a test: times
depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

SMALL = {"messages": [{"role": "user", "content": "Your move."}], "max_tokens": 4, "temperature": 0}
USER = [{"role": "user", "content": "Your move. Answer like [4]."}]

# kind -> (request body as bytes or a dict, expected status class)
HOSTILE: dict[str, Any] = {
    "long guided_choice": {"messages": USER, "guided_choice": ["[1]", "word " * 5000]},
    "lone surrogate": b'{"messages": [{"role": "user", "content": "hi \\ud800"}]}',
    "surrogate in a choice": b'{"messages": [{"role": "user", "content": "hi"}],'
    b' "guided_choice": ["a", "\\udfff"]}',
    "max_tokens above the limit": {"messages": USER, "max_tokens": 10**9},
    "prompt over the context": {"messages": [{"role": "user", "content": "go " * 40_000}]},
    "malformed JSON": b'{"messages": [',
    "n=2": {"messages": USER, "n": 2},
    "guided_regex": {"messages": USER, "guided_regex": "a+"},
    "empty messages": {"messages": []},
}
VALID = {"messages": USER, "max_tokens": 64, "temperature": 1.0}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(
    model: str, port: int, log: Path, limit: int = 256, tree: str = ""
) -> subprocess.Popen[bytes]:
    """The real `spiral serve` on 127.0.0.1:port; from source tree `tree` if given (run
    there, first on PYTHONPATH, so its `spiral` package is the one imported)."""
    cmd = [sys.executable, "-m", "spiral.cli", "serve", f"checkpoint={model}", f"port={port}",
           f"max_tokens_limit={limit}", "device=cpu"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": tree} if tree else None
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tree or None
        )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"spiral serve ended at start-up:\n{log.read_text()[-2000:]}")
        try:
            httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
            return proc
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("spiral serve did not open its port within 180 s")


async def post(client: httpx.AsyncClient, body: Any, timeout: float = 120) -> int:
    if isinstance(body, bytes):
        headers = {"content-type": "application/json"}
        reply = await client.post("/chat/completions", content=body, headers=headers,
                                  timeout=timeout)  # fmt: skip
    else:
        reply = await client.post("/chat/completions", json=body, timeout=timeout)
    return reply.status_code


async def probe(client: httpx.AsyncClient, until: float, times: list[float]) -> Counter[str]:
    """Small valid requests one after another until `until`, each timed."""
    seen: Counter[str] = Counter()
    while time.monotonic() < until:
        t0 = time.perf_counter()
        status = await post(client, SMALL)
        times.append(time.perf_counter() - t0)
        seen[f"small valid -> {status}"] += 1
    return seen


async def loader(client: httpx.AsyncClient, until: float, rng: random.Random) -> Counter[str]:
    seen: Counter[str] = Counter()
    kinds = [*HOSTILE, "valid 64 tokens", "client leaves mid-generation"]
    while time.monotonic() < until:
        kind = rng.choice(kinds)
        if kind == "client leaves mid-generation":
            body = {"messages": USER, "max_tokens": 256, "temperature": 1.0}
            try:
                await post(client, body, timeout=0.3)
                seen[f"{kind} -> finished first"] += 1
            except httpx.TimeoutException:
                seen[f"{kind} -> left"] += 1
            continue
        status = await post(client, VALID if kind == "valid 64 tokens" else HOSTILE[kind])
        seen[f"{kind} -> {status}"] += 1
    return seen


async def long_loader(client: httpx.AsyncClient, until: float, tokens: int) -> Counter[str]:
    """One long reply after another until `until`."""
    seen: Counter[str] = Counter()
    body = {"messages": USER, "max_tokens": tokens, "temperature": 1.0}
    while time.monotonic() < until:
        status = await post(client, body, timeout=600)
        seen[f"valid {tokens} tokens -> {status}"] += 1
    return seen


async def big_body(client: httpx.AsyncClient, megabytes: float) -> dict[str, Any]:
    """A valid chat body of `megabytes` MB (one long user message) and, sent 0.2 s after
    it, a small request: each one's status and time."""
    words = int(megabytes * 1e6 / 3)
    body = json.dumps({"messages": [{"role": "user", "content": "go " * words}]}).encode()

    async def timed(payload: Any, delay: float) -> tuple[int, float]:
        await asyncio.sleep(delay)
        t0 = time.perf_counter()
        status = await post(client, payload, timeout=600)
        return status, time.perf_counter() - t0

    (big, big_s), (small, small_s) = await asyncio.gather(timed(body, 0), timed(SMALL, 0.2))
    return {"bytes": len(body), "status": big, "seconds": big_s,
            "small_beside_status": small, "small_beside_s": small_s}  # fmt: skip


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timings(values: list[float]) -> dict[str, Any]:
    """Percentiles of a list of times, and every time (in the order they were taken)."""
    if not values:
        return {"n": 0, "each": []}
    return {"n": len(values), "p50": percentile(values, 0.5), "p99": percentile(values, 0.99),
            "mean": statistics.fmean(values), "each": [round(v, 4) for v in values]}  # fmt: skip


async def run(
    base: str,
    seconds: float,
    clients: int,
    seed: int,
    big_mb: float = 0,
    long_clients: int = 0,
    long_tokens: int = 256,
) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=clients + long_clients + 8)
    async with httpx.AsyncClient(base_url=base, limits=limits) as client:
        idle: list[float] = []
        await probe(client, time.monotonic() + min(10.0, seconds / 4), idle)
        loaded: list[float] = []
        until = time.monotonic() + seconds
        rngs = [random.Random(seed * 1000 + k) for k in range(clients)]
        tallies = await asyncio.gather(
            probe(client, until, loaded),
            *(loader(client, until, r) for r in rngs),
            *(long_loader(client, until, long_tokens) for _ in range(long_clients)),
        )
        big = await big_body(client, big_mb) if big_mb else None
        alive = (await client.get("/models")).status_code == 200
    status = sum(tallies, Counter())
    return {
        "seconds": seconds,
        "clients": clients,
        "long_clients": long_clients,
        "long_tokens": long_tokens,
        "requests": sum(status.values()),
        "by_kind_and_status": dict(sorted(status.items())),
        "small_idle_s": timings(idle),
        "small_loaded_s": timings(loaded),
        "big_body": big,
        "server_alive_at_end": alive,
    }


def failures(result: dict[str, Any]) -> list[str]:
    """What broke the rules: a hostile request not refused, a valid one not served, a 5xx."""
    bad = []
    for key, count in result["by_kind_and_status"].items():
        kind, _, status = key.rpartition(" -> ")
        if status in ("left", "finished first"):
            continue
        code = int(status)
        valid = kind.startswith(("small valid", "valid"))
        if code >= 500 or (valid and code != 200) or (not valid and not 400 <= code < 500):
            bad.append(f"{key}: {count}")
    big = result.get("big_body")
    if big and not (400 <= big["status"] < 500 and big["small_beside_status"] == 200):
        bad.append(f"big body -> {big['status']}, the small request beside it -> "
                   f"{big['small_beside_status']}")  # fmt: skip
    if not result["server_alive_at_end"]:
        bad.append("the server did not answer at the end")
    return bad


def bench_tree(args: argparse.Namespace, model: str, tmp: Path, tree: str) -> dict[str, Any]:
    """The whole benchmark against one server (from source tree `tree`, or this one)."""
    port = free_port()
    log_path = tmp / f"serve-{port}.log"
    server = start_server(model, port, log_path, tree=tree)
    try:
        result = asyncio.run(
            run(
                f"http://127.0.0.1:{port}/v1",
                args.seconds,
                args.clients,
                args.seed,
                args.big_body_mb,
                args.long_clients,
                args.long_tokens,
            )  # fmt: skip
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
    log = log_path.read_text(errors="replace")
    result["tracebacks_in_server_log"] = log.count("Traceback")
    result["failures"] = failures(result)
    if result["tracebacks_in_server_log"]:
        result["failures"].append(f"{result['tracebacks_in_server_log']} tracebacks in the log")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="", help="model folder (default: a tiny random one)")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--long-clients", type=int, default=0,
                        help="clients asking one long reply after another")  # fmt: skip
    parser.add_argument("--long-tokens", type=int, default=256)
    parser.add_argument("--trees", nargs="*", default=[], metavar="NAME=DIR",
                        help="run once per source tree, side by side")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default="", help="write the result here")
    parser.add_argument("--big-body-mb", type=float, default=50.0,
                        help="after the load, one body this large beside a small request "
                        "(0: skip)")  # fmt: skip
    args = parser.parse_args(argv)
    trees = dict(t.split("=", 1) for t in args.trees)
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if not model:
            from spiral.testing import make_tiny_model

            model = str(make_tiny_model(Path(tmp) / "model"))
        if trees:
            runs = {name: bench_tree(args, model, Path(tmp), tree) for name, tree in trees.items()}
            result: dict[str, Any] = {"argv": sys.argv[1:] if argv is None else argv,
                                      "trees": trees, "runs": runs}  # fmt: skip
            result["failures"] = [f"{n}: {f}" for n, r in runs.items() for f in r["failures"]]
        else:
            result = bench_tree(args, model, Path(tmp), "")
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
