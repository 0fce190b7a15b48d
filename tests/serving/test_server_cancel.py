"""`spiral serve` frees the model when a client leaves and exits promptly on SIGTERM.

The server side is real (FastAPI + uvicorn, the tiny real model's tokenizer and config);
the sampler is a stand-in that holds the model until its request is cancelled, so the
tests do not depend on how fast the machine decodes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from evaluation_cli import free_port, running_server, tiny_model_dir

from spiral.agents.model_agent import load_sampler, resolve_source
from spiral.engines.base import SamplingCancelled, SamplingParams
from spiral.serving.server import create_app

BLOCKING_SAMPLER = textwrap.dedent(
    '''
    import threading

    from spiral.engines.base import SamplingCancelled


    class Blocking:
        """Requests with max_tokens >= 100 hold the model until cancelled (at most 60 s);
        shorter ones are sampled by the real sampler. (The tests send those seeded, so
        the server samples them whole rather than in slices.)"""

        version = 0

        def __init__(self, real, log):
            self.real, self.model, self.log = real, real.model, log
            self.cancelled = threading.Event()

        @property
        def tokenizer(self):
            return self.real.tokenizer

        def sample(self, prompts, params, constraints=None):
            if params.max_tokens < 100:
                return self.real.sample(prompts, params, constraints)
            self.log("sampling")
            if params.cancel.wait(60):
                self.cancelled.set()
                self.log("cancelled")
                raise SamplingCancelled("cancelled")
            raise RuntimeError("never cancelled")
    '''
)


def _blocking(log: Any) -> Any:
    namespace: dict[str, Any] = {}
    exec(BLOCKING_SAMPLER, namespace)  # the same class the SIGTERM subprocess uses
    real = load_sampler(resolve_source(str(tiny_model_dir())), device="cpu")
    return namespace["Blocking"](real, log)


def test_a_client_that_leaves_cancels_its_generation() -> None:
    sampler = _blocking(lambda _: None)
    body = {"model": "x", "messages": [{"role": "user", "content": "hi"}]}
    with running_server(create_app(sampler, "tiny")) as url:
        with pytest.raises(httpx.ReadTimeout):  # the client gives up after 1 s
            httpx.post(
                f"{url}/chat/completions", json={**body, "max_tokens": 500, "seed": 1}, timeout=1
            )
        assert sampler.cancelled.wait(10), "the server kept generating for a client that left"
        # The lock is free again: the next request is answered.
        reply = httpx.post(f"{url}/chat/completions", json={**body, "max_tokens": 3}, timeout=30)
        assert reply.status_code == 200
        assert reply.json()["usage"]["completion_tokens"] <= 3


def test_the_torch_sampler_stops_when_cancelled() -> None:
    sampler = load_sampler(resolve_source(str(tiny_model_dir())), device="cpu")
    prompt = sampler.tokenizer.encode("hello there")

    class AfterChecks:
        def __init__(self, n: int) -> None:
            self.n, self.checks = n, 0

        def is_set(self) -> bool:
            self.checks += 1
            return self.checks > self.n

    flag = AfterChecks(3)
    params = SamplingParams(max_tokens=200, temperature=1.0, seed=0, cancel=flag)
    with pytest.raises(SamplingCancelled):
        sampler.sample([prompt, prompt], params)
    assert flag.checks == 4  # three tokens decoded, stopped before the fourth
    done = sampler.sample([prompt], SamplingParams(max_tokens=5, seed=0, cancel=AfterChecks(99)))
    assert 0 < len(done[0].tokens) <= 5


def test_sigterm_ends_the_server_promptly_mid_request(tmp_path: Path) -> None:
    port = free_port()
    script = tmp_path / "serve_blocking.py"
    script.write_text(
        BLOCKING_SAMPLER
        + textwrap.dedent(
            f"""
            import sys
            import signal

            from spiral.agents.model_agent import load_sampler, resolve_source
            from spiral.serving.server import create_app, run_server

            # As a terminal's session starts it, whatever this suite was started under
            # (`nohup` and `&` leave SIGHUP or SIGINT ignored in what they start).
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            log = lambda word: print(word, flush=True)
            real = load_sampler(resolve_source({str(tiny_model_dir())!r}), device="cpu")
            run_server(create_app(Blocking(real, log), "tiny"), "127.0.0.1", {port})
            log("exited")
            """
        )
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        for _ in range(600):  # up to ~60 s for the model to load and the port to open
            try:
                httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        body = {"model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 500,
                "seed": 1}  # fmt: skip
        answers: list[Any] = []

        def ask() -> None:
            try:
                answers.append(httpx.post(url, json=body, timeout=60))
            except httpx.HTTPError as err:
                answers.append(err)

        client = threading.Thread(target=ask, daemon=True)
        client.start()
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"sampling"
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
    # uvicorn re-raises the captured SIGTERM after its shutdown, so the process may end
    # by the signal itself rather than return from run_server; either way the
    # generation in flight ended with it (a sampler that ignored SIGTERM would hold the
    # process for its full 60 s).
    assert proc.returncode in (0, -signal.SIGTERM), err.decode()[-2000:]
    assert set(out.decode().split()) <= {"cancelled", "exited"}
    assert "Traceback" not in err.decode(), err.decode()[-2000:]
    assert took < 20, f"SIGTERM took {took:.1f} s to end the server"
    # The client in flight is told why, not dropped.
    client.join(timeout=10)
    assert len(answers) == 1 and isinstance(answers[0], httpx.Response), answers
    assert answers[0].status_code == 503, answers[0].text
    assert "shutting down" in answers[0].json()["error"]["message"]


def _ignore_errors(fn: Any, *args: Any, **kwargs: Any) -> None:
    with contextlib.suppress(httpx.HTTPError):
        fn(*args, **kwargs)


LOGGED_SAMPLER = textwrap.dedent(
    '''
    class Logged:
        """The real sampler, saying on stdout how many requests joined its running batch."""

        version = 0

        def __init__(self, real, log):
            self.real, self.model, self.tokenizer, self.log = real, real.model, real.tokenizer, log

        def sample(self, *args, **kwargs):
            return self.real.sample(*args, **kwargs)

        def running_batch(self):
            batch = self.real.running_batch()
            join = batch.join

            def logged_join(prompts, *rest):
                join(prompts, *rest)
                self.log(f"joined {len(prompts)}")

            batch.join = logged_join
            return batch
    '''
)


def _serve_logged(tmp_path: Path, port: int) -> subprocess.Popen[bytes]:
    script = tmp_path / "serve_logged.py"
    script.write_text(
        LOGGED_SAMPLER
        + textwrap.dedent(
            f"""
            import signal

            from spiral.agents.model_agent import load_sampler, resolve_source
            from spiral.serving.server import create_app, run_server

            # As a terminal's session starts it, whatever this suite was started under
            # (`nohup` and `&` leave SIGHUP or SIGINT ignored in what they start).
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            log = lambda word: print(word, flush=True)
            real = load_sampler(resolve_source({str(tiny_model_dir())!r}), device="cpu")
            try:
                run_server(create_app(Logged(real, log), "tiny"), "127.0.0.1", {port})
            except KeyboardInterrupt:  # Ctrl-C, after the drain; `spiral` says "interrupted"
                pass
            log("exited")
            """
        )
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT], ids=["SIGHUP", "SIGINT"])
def test_a_hangup_or_interrupt_drains_like_sigterm(tmp_path: Path, sig: signal.Signals) -> None:
    """Requests in flight when the terminal hangs up (or Ctrl-C) each get their reply or
    a 503 (a stream: an error event, then [DONE]); none is dropped."""
    port = free_port()
    proc = _serve_logged(tmp_path, port)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    body = {"model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4000,
            "temperature": 1.0}  # fmt: skip
    answers: list[Any] = []

    def ask(stream: bool) -> None:
        try:
            if stream:
                with httpx.stream("POST", url, json={**body, "stream": True}, timeout=60) as r:
                    answers.append([line for line in r.iter_lines() if line])
            else:
                answers.append(httpx.post(url, json=body, timeout=60))
        except httpx.HTTPError as err:
            answers.append(err)

    try:
        for _ in range(600):  # up to ~60 s for the model to load and the port to open
            try:
                httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        clients = [threading.Thread(target=ask, args=(k == 0,), daemon=True) for k in range(5)]
        for client in clients:
            client.start()
        assert proc.stdout is not None
        joined = 0
        while joined < len(clients):  # every request is decoding before the signal
            joined += int(proc.stdout.readline().split()[-1])
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    for client in clients:
        client.join(timeout=30)
    assert proc.returncode in (0, -sig), err.decode()[-2000:]
    assert "Traceback" not in err.decode(), err.decode()[-2000:]
    assert len(answers) == len(clients)
    for answer in answers:
        if isinstance(answer, list):  # the stream: its last event ends it or says why
            assert answer[-1] == "data: [DONE]", answer[-3:]
            last = json.loads(answer[-2].removeprefix("data: "))
            ended = "error" in last or last["choices"][0]["finish_reason"] is not None
            assert ended, last
            continue
        assert isinstance(answer, httpx.Response), f"a client was dropped: {answer!r}"
        assert answer.status_code in (200, 503), answer.text
