"""The loop's weight average (`spiral.train.averaging`, `weight_ema_decay`) over a torch
learner: the bias-corrected moving average of the iterates, swapped in for evaluation,
saved beside the weights, restored exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from spiral.agents.model_agent import resolve_source
from spiral.engines.base import AVERAGED, StaleSamplerError
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.learner import TorchLearner
from spiral.train.averaging import WeightAverage
from spiral.types import Datum

from .conftest import PROMPT_TEXTS, chat_prompts, is_loss, to_datum
from .test_learner import _datums


def _trainable(learner: TorchLearner) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in learner._named_trainable()}


def _steps(
    learner: TorchLearner, datums: list[Datum], n: int, average: WeightAverage | None = None
) -> list[dict[str, torch.Tensor]]:
    iterates = []
    for _ in range(n):
        learner.forward_backward(datums, is_loss)
        learner.optim_step(1e-2)
        if average is not None:
            average.update(learner.trained_state())
        iterates.append(_trainable(learner))
    return iterates


@pytest.mark.parametrize("rank", [4, 0])
def test_average_is_the_bias_corrected_ema_of_the_iterates(tiny_llama: Path, rank: int) -> None:
    decay = 0.5
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=rank))
    average = WeightAverage(decay)
    iterates = _steps(learner, _datums(learner), 3, average)
    # Hand-worked weights for d = 0.5 and three iterates: (1-d) d^(3-k) / (1-d^3)
    # = 1/7, 2/7, 4/7 for theta_1, theta_2, theta_3.
    weights = [1 / 7, 2 / 7, 4 / 7]
    live, version = _trainable(learner), learner.version
    with average.swapped_into(learner):
        inside = _trainable(learner)
        assert learner.version == version  # the same version inside: nothing trained
    for name, value in inside.items():
        expected = sum(w * it[name] for w, it in zip(weights, iterates, strict=True))
        torch.testing.assert_close(value, expected, rtol=1e-5, atol=1e-6)
    # The live weights are back after the block, bit for bit.
    for name, value in _trainable(learner).items():
        assert torch.equal(value, live[name])
    assert any(not torch.equal(inside[n], live[n]) for n in live)


def test_averaged_block_changes_what_samplers_see(tiny_llama: Path) -> None:
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4))
    average = WeightAverage(0.9)
    datums = _datums(learner)
    _steps(learner, datums, 3, average)
    live_lp = learner.logprobs(datums)
    before = learner.sampler()
    with average.swapped_into(learner):
        avg_lp = learner.logprobs(datums)
        with pytest.raises(StaleSamplerError):  # made before the swap: refuses
            before.score([[1, 2]], [[3]])
    assert avg_lp != live_lp
    assert learner.logprobs(datums) == live_lp


def test_no_average_before_a_step_and_no_decay_of_one(tiny_llama: Path) -> None:
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4))
    with pytest.raises(RuntimeError, match="not stepped"), WeightAverage(0.9).swapped_into(learner):
        pass
    with pytest.raises(ValueError, match="decay must be in"):
        WeightAverage(1.0)


@pytest.mark.parametrize("rank", [4, 0])
def test_average_survives_save_and_load_exactly(
    tiny_llama: Path, tmp_path: Path, rank: int
) -> None:
    cfg = ModelConfig(str(tiny_llama), lora_rank=rank)
    learner, average = TorchLearner(cfg), WeightAverage(0.8)
    datums = _datums(learner)
    _steps(learner, datums, 2, average)
    learner.save(tmp_path / "ckpt")
    average.save(tmp_path / "ckpt" / AVERAGED, learner)
    assert (tmp_path / "ckpt" / AVERAGED / "averaging.json").is_file()

    restored = TorchLearner(cfg)
    restored.load(tmp_path / "ckpt")
    again = WeightAverage.load(tmp_path / "ckpt" / AVERAGED, restored, 0.8)
    assert again is not None and again.count == 2
    assert restored.logprobs(datums) == learner.logprobs(datums)
    # One more identical step on both: the averages stay identical, bit for bit.
    _steps(learner, datums, 1, average)
    _steps(restored, datums, 1, again)
    with average.swapped_into(learner):
        a = _trainable(learner)
    with again.swapped_into(restored):
        b = _trainable(restored)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    # A folder without an average gives none (averaging restarts).
    assert WeightAverage.load(tmp_path / "ckpt", restored, 0.8) is None


def test_averaged_folder_is_evaluated_with_the_run_config(tiny_llama: Path, tmp_path: Path) -> None:
    learner, average = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4)), WeightAverage(0.9)
    tok = learner.tokenizer
    prompts = chat_prompts(tok, PROMPT_TEXTS)
    from spiral.engines.base import SamplingParams

    out = learner.sampler().sample(prompts[:2], SamplingParams(max_tokens=4, seed=0))
    datums = [to_datum(p, c, 1.0) for p, c in zip(prompts[:2], out, strict=True)]
    _steps(learner, datums, 1, average)
    ckpt = tmp_path / "checkpoints" / "step_000001"
    learner.save(ckpt / "learner")
    average.save(ckpt / "learner" / AVERAGED, learner)
    (ckpt / "loop_state.json").write_text(
        '{"step": 1, "baselines": {}, "config": {"answer_format": "constrained"}}',
        encoding="utf-8",
    )
    (ckpt / "COMPLETE").write_text("", encoding="utf-8")
    source = resolve_source(str(ckpt / "learner" / AVERAGED))
    assert source.model == str(ckpt / "learner" / AVERAGED)
    assert source.config["answer_format"] == "constrained"
    assert source.name == "ckpt:step_000001/averaged" and source.step == 1
