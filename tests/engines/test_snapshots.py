"""Pool members as LoRA adapters over one base model (spiral.engines.torch.snapshots), and for
full fine-tuning as model folders read on demand (spiral.engines.torch.full_members): frozen
while the policy trains, switched per call, and equal to their saved folder loaded alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from spiral.engines.base import SamplingParams, StaleSamplerError
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.learner import TorchLearner
from spiral.engines.torch.sampler import TorchSampler
from spiral.engines.torch.snapshots import SnapshotError, snapshot_names

from .conftest import PROMPT_TEXTS, chat_prompts, is_loss, move_constraint
from .test_learner import _datums


def _score(sampler: object, prompts: list[list[int]]) -> list[list[float]]:
    continuations = [p[-3:] for p in prompts]
    return sampler.score(prompts, continuations)  # type: ignore[attr-defined]


def _train(learner: TorchLearner, n: int) -> None:
    datums = _datums(learner)
    for _ in range(n):
        learner.forward_backward(datums, is_loss)
        learner.optim_step(1e-2)


def test_members_are_frozen_and_switch_per_call(tiny_llama: Path, tmp_path: Path) -> None:
    learner = TorchLearner(ModelConfig(model=str(tiny_llama), lora_rank=4, device="cpu"))
    prompts = chat_prompts(learner.tokenizer, PROMPT_TEXTS)
    _train(learner, 2)
    before = _score(learner.sampler(), prompts)
    trainable = {n: p.detach().clone() for n, p in learner._named_trainable()}
    learner.frozen.freeze("step_000002", tmp_path / "step_000002")
    member = learner.frozen.sampler("step_000002")
    assert _score(member, prompts) == before  # the member is the policy of that moment
    # Sampling with the member leaves the trained adapter trainable and untouched.
    member.sample(prompts[:2], SamplingParams(max_tokens=3, seed=0))
    after_switch = {n: p.detach() for n, p in learner._named_trainable()}
    assert after_switch.keys() == trainable.keys()
    assert all(torch.equal(trainable[n], after_switch[n]) for n in trainable)
    _train(learner, 3)
    moved = _score(learner.sampler(), prompts)
    assert moved != before  # the policy trained on...
    assert _score(member, prompts) == before  # ...and the member did not change
    # Its folder, loaded on its own as a model, gives the same log-probs.
    alone = TorchLearner(
        ModelConfig(model=str(tmp_path / "step_000002"), lora_rank=4, device="cpu")
    )
    alone_scores = _score(alone.sampler(), prompts)
    assert [v for row in alone_scores for v in row] == pytest.approx(
        [v for row in before for v in row], abs=1e-6
    )
    # And loaded back as a member of a fresh learner (resume), bit for bit.
    fresh = TorchLearner(ModelConfig(model=str(tiny_llama), lora_rank=4, device="cpu"))
    fresh.frozen.load("step_000002", tmp_path / "step_000002")
    assert _score(fresh.frozen.sampler("step_000002"), prompts) == before
    learner.frozen.drop("step_000002")
    assert snapshot_names(learner.model) == []
    with pytest.raises(StaleSamplerError):
        _score(member, prompts)


def test_checkpoints_hold_only_the_trained_adapter(tiny_llama: Path, tmp_path: Path) -> None:
    learner = TorchLearner(ModelConfig(model=str(tiny_llama), lora_rank=4, device="cpu"))
    _train(learner, 1)
    learner.frozen.freeze("step_000001", tmp_path / "pool" / "step_000001")
    learner.save(tmp_path / "ckpt")
    assert not (tmp_path / "ckpt" / "step_000001").exists()
    with pytest.raises(SnapshotError, match="already exists"):
        learner.frozen.freeze("step_000001", tmp_path / "pool" / "again")


def test_full_fine_tuning_members_are_folders_read_under_a_bound(
    tiny_llama: Path, tmp_path: Path
) -> None:
    learner = TorchLearner(
        ModelConfig(model=str(tiny_llama), lora_rank=0, device="cpu"), max_loaded_members=1
    )
    assert not learner.frozen.share_model  # one sampler call per member
    prompts = chat_prompts(learner.tokenizer, PROMPT_TEXTS)
    _train(learner, 2)
    early = _score(learner.sampler(), prompts)
    learner.frozen.freeze("step_000002", tmp_path / "step_000002")
    _train(learner, 3)
    late = _score(learner.sampler(), prompts)
    learner.frozen.freeze("step_000005", tmp_path / "step_000005")
    _train(learner, 2)
    assert _score(learner.sampler(), prompts) != late  # the policy trained on
    a, b = learner.frozen.sampler("step_000002"), learner.frozen.sampler("step_000005")
    # Each member is the policy of its moment, however the one shell is shared.
    assert _score(a, prompts) == early
    assert _score(b, prompts) == late
    assert _score(a, prompts) == early
    members = learner.full_members
    assert members.loaded == ["step_000002"] and members.loads == 3  # the bound held
    # Members are frozen copies: training never touches them.
    assert all(not p.requires_grad for p in members.model("step_000002").parameters())
    # A member's folder is a model of its own: loaded alone it gives the same log-probs.
    alone = TorchLearner(ModelConfig(model=str(tmp_path / "step_000002"), lora_rank=0))
    assert [v for row in _score(alone.sampler(), prompts) for v in row] == pytest.approx(
        [v for row in early for v in row], abs=1e-6
    )
    # Registered again in a fresh learner (resume): read when first met, bit for bit.
    fresh = TorchLearner(ModelConfig(model=str(tiny_llama), lora_rank=0, device="cpu"))
    fresh.frozen.load("step_000005", tmp_path / "step_000005")
    assert fresh.full_members.loaded == []
    assert _score(fresh.frozen.sampler("step_000005"), prompts) == late
    learner.frozen.drop("step_000002")
    with pytest.raises(SnapshotError, match="dropped"):
        _score(a, prompts)
    with pytest.raises(SnapshotError, match="is missing"):
        fresh.frozen.load("step_000009", tmp_path / "nowhere")
    (tmp_path / "step_000005" / "model.safetensors").write_bytes(b"not weights")
    fresh.frozen.drop("step_000005")
    fresh.frozen.load("step_000005", tmp_path / "step_000005")
    with pytest.raises(SnapshotError, match="step_000005"):
        _score(fresh.frozen.sampler("step_000005"), prompts)


def test_snapshot_magnet_pulls_towards_the_frozen_copy_and_is_saved(
    tiny_llama: Path, tmp_path: Path
) -> None:
    from spiral.algo.regularizers import Regularizer
    from spiral.engines.base import MAGNET
    from spiral.train.magnet import SnapshotMagnet

    learner = TorchLearner(ModelConfig(model=str(tiny_llama), lora_rank=4, device="cpu"))
    magnet = SnapshotMagnet(learner, interval=10)
    datums = _datums(learner)
    reg = Regularizer(kl_coef=0.5, kl_reference="snapshot")
    with pytest.raises(RuntimeError, match="freeze the magnet"):
        learner.forward_backward(datums, is_loss, reg)
    _train(learner, 1)
    magnet.refresh()
    first = learner.forward_backward(datums, is_loss, reg)
    assert first["kl_to_magnet"] == pytest.approx(0.0, abs=1e-7)  # the magnet is the policy
    learner.optim_step(1e-2)
    _train(learner, 2)
    moved = learner.forward_backward(datums, is_loss, reg)
    learner.model.zero_grad(set_to_none=True)
    assert moved["kl_to_magnet"] > 1e-6
    learner.save(tmp_path / "ckpt")
    magnet.save(tmp_path / "ckpt" / MAGNET)
    fresh = TorchLearner(ModelConfig(model=str(tiny_llama), lora_rank=4, device="cpu"))
    fresh.load(tmp_path / "ckpt")
    SnapshotMagnet(fresh, interval=10).load(tmp_path / "ckpt" / MAGNET)
    again = fresh.forward_backward(datums, is_loss, reg)
    assert again["kl_to_magnet"] == pytest.approx(moved["kl_to_magnet"], rel=1e-6)
    magnet.refresh()  # a refresh replaces the magnet with the current weights
    assert learner.forward_backward(datums, is_loss, reg)["kl_to_magnet"] == pytest.approx(
        0.0, abs=1e-7
    )
    assert magnet.due(20) and not magnet.due(21)


def test_one_batch_of_mixed_adapters_equals_each_adapter_alone(
    tiny_llama: Path, tmp_path: Path
) -> None:
    """Population play samples the policy and its pool members in one call: each row
    gets what its own adapter gives alone (same seed and row index: same draws)."""
    learner = TorchLearner(ModelConfig(model=str(tiny_llama), lora_rank=4, device="cpu"))
    prompts = chat_prompts(learner.tokenizer, PROMPT_TEXTS) * 2
    _train(learner, 2)
    learner.frozen.freeze("old", tmp_path / "old")
    _train(learner, 3)
    learner.frozen.freeze("older", tmp_path / "older")  # names sort apart from "default"
    _train(learner, 3)
    sampler = learner.sampler()
    params = SamplingParams(max_tokens=6, seed=7)
    adapters: list[str | None] = [None, "old", "older", None, "old", "older", "old", None]
    mixed = sampler.sample(prompts, params, adapters=adapters)
    alone = {a: sampler.sample(prompts, params, adapters=[a] * len(prompts)) for a in set(adapters)}
    for i, name in enumerate(adapters):
        assert mixed[i].tokens == alone[name][i].tokens
        assert mixed[i].logprobs == pytest.approx(alone[name][i].logprobs, abs=1e-5)
    # The members really differ from the policy, so the test can tell them apart.
    assert {alone[None][i].logprobs for i in range(8)} != {
        alone["old"][i].logprobs for i in range(8)
    }
    with pytest.raises(SnapshotError, match="no LoRA adapter"):
        sampler.sample(prompts[:1], params, adapters=["gone"])


def test_frozen_members_answer_from_kept_distributions(tiny_llama: Path, tmp_path: Path) -> None:
    """A member's constrained answers, once computed, are drawn without a forward: the
    same tokens and log-probs as the model gives, for the same seed."""
    learner = TorchLearner(ModelConfig(model=str(tiny_llama), lora_rank=4, device="cpu"))
    _train(learner, 2)
    learner.frozen.freeze("m", tmp_path / "m")
    _train(learner, 2)
    prompts = chat_prompts(learner.tokenizer, PROMPT_TEXTS) * 8  # 4 distinct, 32 rows
    cons = [move_constraint(learner.tokenizer, think_budget=0)] * len(prompts)
    adapters: list[str | None] = ["m", None] * 16
    # The model's answers, with nothing kept (a sampler without the store).
    plain = TorchSampler(learner.model, learner.tokenizer)
    params = SamplingParams(max_tokens=8, seed=3, temperature=1.3)
    truth = plain.sample(prompts, params, cons, adapters=adapters)
    sampler = learner.sampler()
    first = sampler.sample(prompts, SamplingParams(max_tokens=8, seed=11), cons, adapters=adapters)
    assert sampler.last_stats["kept_rows"] == 0 and learner.frozen_answers["m"]
    assert len(first) == 32
    # Enough draws that every branch the seed-3 rows take has been kept.
    for seed in range(40):
        sampler.sample(prompts, SamplingParams(max_tokens=8, seed=seed), cons, adapters=adapters)
    again = sampler.sample(prompts, params, cons, adapters=adapters)
    assert sampler.last_stats["kept_rows"] == 16  # every member row, no trained row
    for got, want in zip(again, truth, strict=True):
        assert got.tokens == want.tokens
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-5)
    # The trained adapter's rows still differ from the member's: the test can tell.
    assert [c.logprobs for c in truth[0::2]] != [c.logprobs for c in truth[1::2]]
    learner.frozen.drop("m")
    assert "m" not in learner.frozen_answers
