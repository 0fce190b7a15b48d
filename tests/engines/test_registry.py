"""The engine registry is the one place engines are built: train, agents, serve and eval
ask it by name (a probe engine, registered here, records every build)."""

from __future__ import annotations

import importlib.util
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from evaluation_cli import tiny_model_dir

from spiral.engines import registry
from spiral.engines.loading import ModelConfig
from spiral.errors import UsageError

BUILT: list[tuple[str, str]] = []


@pytest.fixture
def probe() -> Iterator[list[tuple[str, str]]]:
    torch_engine = registry.get("torch")

    def learner(model: ModelConfig, **options: Any) -> Any:
        BUILT.append(("learner", model.model))
        return torch_engine.learner(model, **options)

    def sampler(model: ModelConfig, version: int) -> Any:
        BUILT.append(("sampler", model.model))
        return torch_engine.sampler(model, version)

    BUILT.clear()
    registry.register(registry.Engine("probe", learner, sampler))
    yield BUILT
    registry.unregister("probe")


def test_torch_is_the_default_and_unknown_names_are_refused() -> None:
    assert "torch" in registry.names()
    with pytest.raises(
        UsageError, match="unknown engine 'nope'; registered engines: tinker, torch, vllm"
    ):
        registry.get("nope")
    from spiral.train.config import parse_config

    assert parse_config([]).compute.engine == "torch"
    with pytest.raises(UsageError, match="unknown engine"):
        parse_config(["engine=nope"])


def test_vllm_samples_only_and_says_what_to_install() -> None:
    from spiral.engines.loading import ModelConfig
    from spiral.train.config import parse_config

    with pytest.raises(UsageError, match="engine=torch sampler_engine=vllm"):
        registry.learner("vllm", ModelConfig(str(tiny_model_dir())))
    with pytest.raises(UsageError, match="sampler_engine=tinker cannot sample"):
        parse_config(["sampler_engine=tinker"])
    assert parse_config(["sampler_engine=vllm"]).compute.sampler_engine == "vllm"
    if importlib.util.find_spec("vllm") is None:  # this venv: the message names the fix
        with pytest.raises(UsageError, match="make setup-vllm"):
            registry.sampler("vllm", ModelConfig(str(tiny_model_dir())))


def test_training_builds_its_learner_through_the_registry(
    probe: list[tuple[str, str]], tmp_path: Path
) -> None:
    from spiral.train.config import parse_config
    from spiral.train.setup import make_learner_factory

    model = str(tiny_model_dir())
    cfg = parse_config([f"model_name={model}", "engine=probe", "lora_rank=4"])
    learner = make_learner_factory(cfg)()
    assert probe == [("learner", model)]
    assert learner.version == 0


def test_checkpoint_agents_and_eval_get_their_samplers_from_it(
    probe: list[tuple[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # spiral eval writes its results file here
    from spiral.agents.model_agent import make_checkpoint_agent
    from spiral.evaluation.cli import main as eval_main

    model = str(tiny_model_dir())
    agent = make_checkpoint_agent(model, engine="probe", device="cpu")
    assert probe == [("sampler", model)]
    assert agent.sampler is not None
    probe.clear()
    code = eval_main(
        [
            f"checkpoint={model}",
            "engine=probe",
            "opponents=random",
            "games=1",
            "env_ids=TicTacToe-v0",
            "max_tokens=4",
        ]  # fmt: skip
    )
    assert code == 0
    assert probe == [("sampler", model)]


def test_serve_gets_its_sampler_from_it(
    probe: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import spiral.serving.server as server

    served: list[Any] = []
    monkeypatch.setattr(server, "run_server", lambda app, host, port: served.append(app))
    model = str(tiny_model_dir())
    with socket.socket() as free:  # a port nothing listens on, whatever this machine runs
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    assert server.main([f"checkpoint={model}", "engine=probe", f"port={port}"]) == 0
    assert probe == [("sampler", model)] and len(served) == 1
