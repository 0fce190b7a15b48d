"""The snapshot magnet's distributions at constrained answers are kept while it stays
(`engines/torch/magnet_memo.py`): the kept values are the batch path's to rounding, a
second step computes no magnet forward, the same row gives the same bits in any batch
(so a resumed run trains on the numbers an uninterrupted one did), and a refreshed
magnet is computed anew."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from spiral.algo.assemble import turn_to_datum
from spiral.algo.losses import importance_sampling_loss
from spiral.algo.merge import merge_identical
from spiral.algo.regularizers import Regularizer
from spiral.engines.base import MAGNET, SamplingParams
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.batching import plan_positions
from spiral.engines.torch.learner import TorchLearner
from spiral.types import AnswerConstraint, Datum, Turn

from .conftest import PROMPT_TEXTS, chat_prompts

REG = Regularizer(entropy_coef=0.1, kl_coef=0.5, kl_reference="snapshot")


def _rows(learner: TorchLearner, seed: int, prompts: int = 3, free: bool = False) -> list[Datum]:
    """Merged rows over a few prompts answering "[0]".."[3]" (or free text)."""
    tok = learner.tokenizer
    choices = tuple(tuple(tok(f" [{k}]")["input_ids"]) for k in range(4))
    asked = chat_prompts(tok, PROMPT_TEXTS[:prompts]) * 8
    constraint = None if free else AnswerConstraint(choices=choices)
    params = SamplingParams(max_tokens=6, seed=seed, temperature=1.0)
    out = learner.sampler().sample(asked, params, [constraint] * len(asked))
    rng = random.Random(seed)
    rows = [
        turn_to_datum(Turn("KuhnPokerSingle-v0", 0, "policy", "o", tuple(p), c), rng.uniform(-1, 1))
        for p, c in zip(asked, out, strict=True)
    ]
    return merge_identical(rows)[0]


@pytest.fixture
def learner(tiny_llama: Path) -> TorchLearner:
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4, seed=0))
    learner.forward_backward(_rows(learner, seed=9), importance_sampling_loss)
    learner.optim_step(5e-2)  # LoRA B non-zero
    learner.frozen.freeze(MAGNET)
    learner.forward_backward(_rows(learner, seed=8), importance_sampling_loss)
    learner.optim_step(5e-2)  # the live adapter now differs from the magnet
    learner.model.zero_grad(set_to_none=True)
    return learner


def _magnet_dists(learner: TorchLearner, rows: list[Datum]) -> torch.Tensor:
    plan = plan_positions(rows, False, lambda b, t: (b, t))
    magnet = learner._reference_dists(rows, plan, True, snapshot=True)
    return magnet(slice(None))


def _counting_forwards(learner: TorchLearner, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    real = type(learner.model).forward

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(learner.model), "forward", counted)
    return calls


def test_kept_values_are_the_batch_paths_and_a_second_call_runs_no_magnet(
    learner: TorchLearner, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = _rows(learner, seed=1)
    learner.share_prefix = False  # the batch path, as before the memo
    want = _magnet_dists(learner, rows)
    learner.share_prefix = True
    first = _magnet_dists(learner, rows)
    legal = torch.isfinite(want)
    assert torch.equal(legal, torch.isfinite(first)) and legal.any()
    assert torch.allclose(first[legal], want[legal], atol=1e-5)
    calls = _counting_forwards(learner, monkeypatch)
    again = _magnet_dists(learner, rows)
    assert calls[0] == 0 and torch.equal(again, first)
    assert learner._magnet_memo.hits >= len(rows)


def test_a_row_gives_the_same_bits_in_any_batch(tiny_llama: Path) -> None:
    """Two learners with the same weights, one seeing rows in one batch, the other in
    another order and company: the shared rows' values are bit for bit equal."""
    torch.manual_seed(0)
    a = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4, seed=0))
    a.frozen.freeze(MAGNET)
    rows = _rows(a, seed=2)
    others = _rows(a, seed=3, prompts=2)
    mixed = [*others, *rows[::-1]]
    first = _magnet_dists(a, rows)
    a._magnet_memo.bind([])  # forget: computed afresh in the other company
    second = _magnet_dists(a, mixed)
    order = {id(d): k for k, d in enumerate(rows)}
    for j, d in enumerate(mixed[len(others) :]):
        k = order[id(d)]
        plan_rows = plan_positions(rows, False, lambda b, t: (b, t)).datums
        plan_mixed = plan_positions(mixed, False, lambda b, t: (b, t)).datums
        mine = [i for i, b in enumerate(plan_rows) if b == k]
        theirs = [i for i, b in enumerate(plan_mixed) if b == len(others) + j]
        assert torch.equal(first[mine], second[theirs])


def test_a_refreshed_magnet_is_computed_anew(
    learner: TorchLearner, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = _rows(learner, seed=4)
    before = _magnet_dists(learner, rows)
    learner.frozen.drop(MAGNET)
    learner.frozen.freeze(MAGNET)  # the live adapter, which differs from the old magnet
    calls = _counting_forwards(learner, monkeypatch)
    after = _magnet_dists(learner, rows)
    assert calls[0] > 0 and not torch.equal(after, before)
    with torch.no_grad():  # written in place: the same tensors, a new version
        for name, p in learner.model.named_parameters():
            if f".{MAGNET}." in name and "lora_B" in name:
                p.add_(0.1)
    calls[0] = 0
    assert not torch.equal(_magnet_dists(learner, rows), after) and calls[0] > 0


def test_free_text_rows_keep_the_batch_path(
    learner: TorchLearner, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = _rows(learner, seed=5, free=True)
    first = _magnet_dists(learner, rows)
    calls = _counting_forwards(learner, monkeypatch)
    assert torch.equal(_magnet_dists(learner, rows), first) and calls[0] > 0
    assert learner._magnet_memo.hits == 0


def test_a_step_with_the_memo_trains_as_one_without(learner: TorchLearner) -> None:
    """The whole forward_backward with the snapshot KL: gradients equal to rounding."""
    rows = _rows(learner, seed=6)
    grads = []
    for share in (False, True, True):  # batch path; memo filled; memo read
        learner.share_prefix = share
        learner.forward_backward(rows, importance_sampling_loss, REG)
        grads.append(
            {n: p.grad.clone() for n, p in learner.model.named_parameters() if p.grad is not None}
        )
        learner.model.zero_grad(set_to_none=True)
    assert grads[0] and set(grads[0]) == set(grads[1]) == set(grads[2])
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-5), name
        assert torch.equal(grads[1][name], grads[2][name]), name
