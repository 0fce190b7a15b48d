"""vLLM beside the learner on a GPU, the parts that need no GPU: vLLM's share of the
device from what the learner leaves, the settings per platform, a GPU index refused
with its fix, and the sleep/wake order around learning (on a recording stand-in for
`vllm.LLM`, which vLLM's CPU build cannot put to sleep)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from spiral.engines.vllm.engine import VllmEngine
from spiral.engines.vllm.learner import VllmSampledLearner
from spiral.engines.vllm.settings import (
    GIB,
    EngineSettings,
    engine_settings,
    learner_reserve,
    memory_fraction,
)
from spiral.errors import UsageError


def test_vllm_takes_what_the_learner_leaves() -> None:
    total = 80 * GIB
    # 70 GiB free beside a 4B LoRA learner whose optimizer state will take 8 GiB more.
    assert memory_fraction(70 * GIB, total, 8 * GIB) == pytest.approx((70 - 8 - 1) / 80)
    assert memory_fraction(79 * GIB, total, 0) == 0.9  # never the whole device
    assert memory_fraction(70 * GIB, total, 0, asked=0.5) == 0.5
    with pytest.raises(UsageError, match="vllm_gpu_memory=0.95 asks for 76.0 GiB but 70.0"):
        memory_fraction(70 * GIB, total, 0, asked=0.95)
    with pytest.raises(UsageError, match="too little for vLLM: train LoRA"):
        memory_fraction(20 * GIB, total, 16 * GIB)


def test_settings_per_platform() -> None:
    cpu = engine_settings(torch.device("cpu"), max_model_len=2048, kv_cache_gb=2.0)
    assert cpu.llm_kwargs() == {
        "enforce_eager": True,
        "kv_cache_memory_bytes": 2 * GIB,
        "enable_chunked_prefill": False,
        "max_num_batched_tokens": 8192,
    }
    gpu = EngineSettings(True, memory_fraction=0.6).llm_kwargs()
    assert gpu == {"enforce_eager": False, "gpu_memory_utilization": 0.6, "enable_sleep_mode": True}
    assert "kv_cache_memory_bytes" not in gpu  # no KV cap on a GPU


def test_a_second_gpu_is_refused_with_the_fix() -> None:
    with pytest.raises(UsageError, match="CUDA_VISIBLE_DEVICES=1 and device=cuda"):
        engine_settings(torch.device("cuda:1"))


def test_the_learner_reserve_counts_its_trainable_weights() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    model[0].requires_grad_(False)
    assert learner_reserve(SimpleNamespace(model=model)) == 12 * (3 * 2 + 2)
    assert learner_reserve(object()) == 0


class _RecordingLLM:
    """The parts of `vllm.LLM` the engine calls around learning, recorded in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def sleep(self, level: int = 1) -> None:
        self.calls.append(f"sleep({level})")

    def wake_up(self, tags: list[str] | None = None) -> bool:
        self.calls.append(f"wake_up({','.join(tags or [])})")
        return True

    def reset_prefix_cache(self) -> bool:
        self.calls.append("reset_prefix_cache")
        return True

    def collective_rpc(self, method: str, kwargs: dict[str, Any]) -> None:
        self.calls.append(method)


def _engine(gpu: bool, lora_slot: int) -> VllmEngine:
    engine = VllmEngine.__new__(VllmEngine)  # no vLLM: the stand-in instead of `vllm.LLM`
    engine.llm = _RecordingLLM()
    engine.settings = EngineSettings(gpu)
    engine.asleep, engine.lora_slot = False, lora_slot
    engine._requests, engine._ids = {}, iter(range(1, 100))
    engine.totals = {"decode_tokens": 0.0, "prompt_tokens": 0.0, "sample_s": 0.0}
    return engine


class _Learner:
    """A learner's surface as the vLLM wrapper uses it."""

    def __init__(self) -> None:
        self.version = 0
        self.frozen = SimpleNamespace(share_model=True)
        self.steps: list[str] = []

    def forward_backward(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        self.steps.append("forward_backward")
        return {"loss": 0.0}

    def trained_state(self) -> dict[str, torch.Tensor]:
        return {"w": torch.zeros(1)}

    def save_weights(self, folder: Path, state: Any = None) -> None:
        folder.mkdir(parents=True)


def _two_steps(engine: VllmEngine, tmp_path: Path) -> list[str]:
    inner = _Learner()
    learner = VllmSampledLearner(inner, engine, workdir=tmp_path)
    learner.sampler()  # sample version 0
    for version in (1, 2):
        learner.forward_backward([], None)
        inner.version = version
        learner.sampler()
    return engine.llm.calls


def test_full_weights_sleep_while_learning_and_wake_in_order(tmp_path: Path) -> None:
    calls = _two_steps(_engine(gpu=True, lora_slot=0), tmp_path)
    wake = ["wake_up(weights)", "reload_weights", "reset_prefix_cache", "reset_prefix_cache",
            "wake_up(kv_cache)"]  # fmt: skip
    assert calls == ["reload_weights", "reset_prefix_cache", *(["sleep(2)", *wake] * 2)]


def _lora_engine(gpu: bool) -> VllmEngine:
    engine = _engine(gpu, lora_slot=16)
    calls = engine.llm.calls  # adapters go to vLLM's LoRA requests: recorded here instead
    engine.add_adapter = lambda name, folder: calls.append("add_adapter")  # type: ignore[method-assign]
    engine.drop_adapter = lambda name: calls.append("drop_adapter")  # type: ignore[method-assign]
    return engine


def test_lora_keeps_its_base_in_host_memory_while_asleep(tmp_path: Path) -> None:
    calls = _two_steps(_lora_engine(gpu=True), tmp_path)
    wake = ["wake_up(weights)", "reset_prefix_cache", "wake_up(kv_cache)"]
    swap = ["drop_adapter", "add_adapter"]
    assert calls == [*swap, *(["sleep(1)", *wake, *swap] * 2)]


def test_a_cpu_engine_never_sleeps(tmp_path: Path) -> None:
    assert _two_steps(_lora_engine(gpu=False), tmp_path) == ["drop_adapter", "add_adapter"] * 3
