"""Rows run whole can be packed into one sequence without padding: the same log-probs,
gradients (to 1e-5 in fp32) and diagnostics as left-padded batches, for LoRA and full
fine-tuning, with the KL's reference model computed the same way; micro-batches then
hold rows up to their summed length."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from spiral.algo.regularizers import Regularizer
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.batching import pack_plain
from spiral.engines.torch.learner import TorchLearner
from spiral.types import Datum

from .conftest import is_loss, sample_agreement_datums


def _learner(model: Path, rank: int) -> TorchLearner:
    learner = TorchLearner(ModelConfig(str(model), lora_rank=rank, device="cpu", dtype="float32"))
    if rank:
        for _, p in learner._named_trainable():  # LoRA B starts at zero: make it matter
            torch.nn.init.normal_(p, std=0.05)
    learner.share_prefix = False
    return learner


@pytest.mark.parametrize("rank", [4, 0])
def test_packed_rows_give_the_padded_gradient(tiny_llama: Path, rank: int) -> None:
    learner = _learner(tiny_llama, rank)
    datums = sample_agreement_datums(learner, 0, 1.0)
    assert len({len(d.input_ids) for d in datums}) > 1  # padding would be needed
    reg = Regularizer(entropy_coef=0.1, kl_coef=0.2, kl_reference="reference")
    out = {}
    for pack in (False, True):
        learner.pack_rows = pack
        metrics = learner.forward_backward(datums, is_loss, reg)
        grads = {n: p.grad.clone() for n, p in learner._named_trainable()}
        learner.model.zero_grad(set_to_none=True)
        out[pack] = (metrics, grads, learner.logprobs(datums))
    (m_pad, g_pad, lp_pad), (m_pack, g_pack, lp_pack) = out[False], out[True]
    for name, grad in g_pad.items():
        torch.testing.assert_close(g_pack[name], grad, atol=1e-5, rtol=0)
    for key in ("loss", "entropy", "kl_to_magnet", "num_tokens"):
        assert m_pack[key] == pytest.approx(m_pad[key], rel=1e-5, abs=1e-7)
    for a, b in zip(lp_pack, lp_pad, strict=True):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=1e-5, rtol=0)


def _datum(n: int) -> Datum:
    return Datum(tuple(range(n)), tuple(range(1, n + 1)), (0.0,) * n, (0.0,) * n, (1.0,) * n)


def test_packed_micro_batches_hold_rows_up_to_their_summed_length() -> None:
    datums = [_datum(n) for n in (10, 10, 30, 40)]
    order = [0, 1, 2, 3]
    assert pack_plain(datums, order, 50, packed=True) == [[0, 1, 2], [3]]
    assert pack_plain(datums, order, 50, packed=False) == [[0, 1], [2], [3]]  # rows x 30 > 50
    assert pack_plain(datums, order, 5, packed=True) == [[0], [1], [2], [3]]  # one row each
