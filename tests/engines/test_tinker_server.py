"""engine=tinker against a real Tinker-API server: SkyRL's (`skyrl[tinker]` 0.4.0, JAX on
the CPU), started here over a tiny Qwen3 folder (`make test-tinker` builds its Python 3.12
environment and runs this module; skipped elsewhere).

The server differs from the hosted service in ways each test below names and asserts, so
that a server which closes a gap is noticed: its sample promise lacks the sequence ids
the SDK asserts (the bridge in `tinker_bridge.py` adds them), its prompt log-probs leave
out the first position's None (the engine aligns them), it reports no loss (the engine
computes its own), does not clip gradients (the engine says so once), takes only int32
seeds (the engine folds them) and cannot start a training client from a saved state (the
engine loads the state into a fresh client, which the service serves exactly).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import subprocess
import time
import urllib.request
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from spiral.algo.losses import get_loss
from spiral.cli import main as cli_main
from spiral.engines import registry
from spiral.engines.base import SamplingParams
from spiral.engines.loading import ModelConfig
from spiral.errors import SpiralError
from spiral.types import Datum

from .tinker_bridge import Bridge

SERVER_VENV = os.environ.get("SPIRAL_TINKER_SERVER_VENV", "")
pytestmark = [
    pytest.mark.tinker_server,
    pytest.mark.skipif(not SERVER_VENV, reason="a real Tinker-API server: make test-tinker"),
]
SPIRAL = Path(__file__).resolve().parents[2] / "spiral"


@dataclass
class Served:
    url: str  # the server itself
    bridge: Bridge
    model: str  # a local folder: three or more slashes, or the SDK reads a hub id
    work: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(work: Path, model: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`uv run python -m skyrl.tinker.api` in the server's environment (it starts its
    engine with `uv run` and reads its own command line to do so)."""
    port = _free_port()
    venv = Path(SERVER_VENV).resolve()
    env = {
        **os.environ,
        "VIRTUAL_ENV": str(venv),
        "PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '')}",
        "JAX_PLATFORMS": "cpu",
    }
    env.pop("PYTHONPATH", None)
    cmd = [
        str(venv / "bin" / "uv"), "run", "--no-project", "python", "-m", "skyrl.tinker.api",
        "--base-model", str(model), "--backend", "jax", "--host", "127.0.0.1",
        "--port", str(port), "--database-url", f"sqlite:///{work / 'db.sqlite'}",
        "--checkpoints-base", str(work / "checkpoints"),
    ]  # fmt: skip
    log = (work / "server.log").open("wb")
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    return proc, f"http://127.0.0.1:{port}"


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, work: Path, limit: float) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(url + "/api/v1/healthz", timeout=5) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(1)
    tail = (work / "server.log").read_text(errors="replace")[-3000:]
    pytest.fail(f"the Tinker-API server did not come up at {url}:\n{tail}")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    from spiral.testing import make_tiny_model

    work = tmp_path_factory.mktemp("tinker-server")
    model = make_tiny_model(work / "models" / "local" / "tiny", arch="qwen3")
    proc, url = _start(work, model)
    bridge = None
    try:
        _wait_healthy(proc, url, work, limit=300)
        bridge = Bridge(url)
        yield Served(url, bridge, str(model), work)
    finally:
        if bridge is not None:
            bridge.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        proc.wait(timeout=60)


@pytest.fixture
def through_bridge(served: Served, monkeypatch: pytest.MonkeyPatch) -> Served:
    monkeypatch.setenv("TINKER_BASE_URL", served.bridge.url)
    monkeypatch.setenv("TINKER_API_KEY", "tml-spiral-test")  # the SDK's key format
    return served


def _row(prompt: list[int], tokens: tuple[int, ...], logprobs: tuple[float, ...]) -> Datum:
    n = len(prompt) - 1
    return Datum(
        input_ids=tuple(prompt) + tokens[:-1],
        target_ids=tuple(prompt[1:]) + tokens,
        sampler_logprobs=(0.0,) * n + logprobs,
        advantages=(0.0,) * n + (1.0,) * len(tokens),
        mask=(0.0,) * n + (1.0,) * len(tokens),
    )


def _ours(caught: list[warnings.WarningMessage]) -> list[str]:
    """Deprecation warnings raised from Spiral's own files."""
    return [
        f"{w.filename}:{w.lineno}: {w.message}"
        for w in caught
        if issubclass(w.category, DeprecationWarning | FutureWarning)
        and Path(w.filename).resolve().is_relative_to(SPIRAL)
    ]


def test_the_servers_gaps_are_the_named_ones(through_bridge: Served) -> None:
    """Each gap as the server has it now: when one closes, its bridge or workaround can go."""
    import tinker

    service = tinker.ServiceClient(base_url=through_bridge.url)  # the server, no bridge
    training = service.create_lora_training_client(base_model=through_bridge.model, rank=4)
    client = training.result().save_weights_and_get_sampling_client().result()
    prompt = tinker.types.ModelInput.from_ints([5, 6, 7, 8])
    params = tinker.types.SamplingParams(max_tokens=2, seed=0)
    with pytest.raises(AssertionError, match="sample_sequence_ids"):
        client.sample(prompt, 1, params).result()  # gap 1: the bridge adds them

    bridged = tinker.ServiceClient(base_url=through_bridge.bridge.url)
    learner = bridged.create_lora_training_client(base_model=through_bridge.model, rank=4)
    sampling = learner.result().save_weights_and_get_sampling_client().result()
    before = through_bridge.bridge.counts["sample_sequence_ids"]
    assert sampling.sample(prompt, 1, params).result().sequences
    assert through_bridge.bridge.counts["sample_sequence_ids"] == before + 1
    # gap 2: one prompt log-prob short (the first position's None left out)
    assert len(sampling.compute_logprobs(prompt).result()) == 3
    # gap 3: int32 seeds only
    with pytest.raises(Exception, match="out of bounds for int32"):
        sampling.sample(prompt, 1, tinker.types.SamplingParams(max_tokens=2, seed=2**40)).result()


def test_a_step_trains_samples_and_resumes_exactly(through_bridge: Served, tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = ModelConfig(model=through_bridge.model, lora_rank=4, seed=0)
        learner = registry.learner("tinker", cfg)
        prompt = learner.tokenizer.encode("Say [4].", add_special_tokens=False)
        done = learner.sampler().sample([prompt], SamplingParams(max_tokens=4, seed=7))[0]
        assert done.tokens and len(done.logprobs) == len(done.tokens)
        # scoring the sample gives the log-probs it was drawn with (prompt log-probs aligned)
        scored = learner.sampler().score([prompt], [list(done.tokens)])[0]
        assert scored == pytest.approx(list(done.logprobs), abs=1e-4)
        row = _row(prompt, done.tokens, done.logprobs)
        ppo = functools.partial(get_loss("ppo"), clip=0.2)
        metrics = learner.forward_backward([row], ppo)
        assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-3)
        assert metrics["loss"] != 0.0  # the server reports none (gap 4): ours, computed
        learner.optim_step(1e-2)
        learner.save(tmp_path / "ckpt")

        resumed = registry.learner("tinker", cfg)
        resumed.load(tmp_path / "ckpt")
        assert resumed.version == learner.version == 1
        assert resumed.logprobs([row]) == learner.logprobs([row])
        for each in (learner, resumed):  # the same next step: Adam's moments came back too
            each.forward_backward([row], ppo)
            each.optim_step(1e-2)
        assert resumed.logprobs([row]) == learner.logprobs([row])
    assert not _ours(caught), _ours(caught)

    # a server that has lost the files answers the load with fresh weights: refused
    pointer = json.loads((tmp_path / "ckpt" / "tinker_state.json").read_text())
    files = through_bridge.work / "checkpoints" / pointer["path"].split("/")[2]
    files.rename(files.with_name(files.name + "-gone"))
    with pytest.raises(SpiralError, match="restored weights that differ"):
        registry.learner("tinker", cfg).load(tmp_path / "ckpt")


def test_spiral_train_resumes_and_its_checkpoint_evaluates(
    through_bridge: Served, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    keys = [
        "engine=tinker", f"model_name={through_bridge.model}", "lora_rank=4",
        "env_ids=KuhnPokerSingle-v0", "batch_size=8", "max_tokens=8", "eval_every=0",
        "save_every=1", "entropy_coef=0", "kl_coef=0", "move_floor=0", "move_floor_coef=0",
        f"log_path={run}",
    ]  # fmt: skip
    assert cli_main(["train", *keys, "max_steps=2"]) == 0
    assert cli_main(["train", *keys, "max_steps=3"]) == 0
    out = capsys.readouterr()
    assert "resumed from" in out.out + out.err and "step_000002" in out.out + out.err
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2]  # logged from 0
    pointer = json.loads((run / "checkpoints/step_000003/learner/tinker_state.json").read_text())
    assert pointer["version"] == 3 and pointer["sampler_path"].startswith("tinker://")

    assert cli_main(["eval", f"checkpoint={run}", "games=2"]) == 2  # the weights are hosted
    assert "add engine=tinker" in capsys.readouterr().err
    assert cli_main(["eval", f"checkpoint={run}", "engine=tinker", "games=2"]) == 0
    said = capsys.readouterr().out
    assert "KuhnPokerSingle-v0 exploitability" in said and "ckpt:step_000003" in said
