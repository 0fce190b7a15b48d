"""head.py: the head's terms a chunk of positions at a time equal the whole computation
(values, entropy, KL and their gradients), recompute each chunk in the backward pass, and
the learner's gradient does not depend on the chunk size."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import spiral.engines.torch.log_probs as log_probs_module
from spiral.algo.regularizers import Regularizer
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.head import chunk_rows, head_terms
from spiral.engines.torch.learner import TorchLearner

from .conftest import is_loss, sample_agreement_datums


def _problem(n: int = 7, hidden: int = 5, vocab: int = 11):
    torch.manual_seed(0)
    head = torch.nn.Linear(hidden, vocab, bias=False)
    hidden_NH = torch.randn(n, hidden, requires_grad=True)
    targets = torch.randint(0, vocab, (n,))
    allowed = [None, (1, 2, 3), None, (4,), None, (0, 5), None][:n]
    magnet_NV = torch.log_softmax(torch.randn(n, vocab), -1)
    calls: list[int] = []

    def dists(h: torch.Tensor, sl: slice) -> torch.Tensor:
        calls.append(h.shape[0])
        logits = head(h)
        for k, a in enumerate(allowed[sl]):
            if a is not None:
                keep = torch.full((vocab,), float("-inf"))
                keep[list(a)] = 0.0
                logits = logits.index_put((torch.tensor([k]),), logits[k] + keep)
        return torch.log_softmax(logits, -1)

    return head, hidden_NH, targets, dists, (lambda sl: magnet_NV[sl]), calls


@pytest.mark.parametrize("rows", [1, 2, 3, 7])
def test_chunks_give_the_whole_terms_and_gradients(rows: int) -> None:
    head, hidden_NH, targets, dists, magnet, calls = _problem()
    whole = head_terms(dists, hidden_NH, targets, magnet, rows=100, floor=0.4)
    assert whole.kl_N is not None and whole.floor_N is not None
    assert float(whole.floor_N[[0, 2, 4, 6]].abs().sum()) == 0.0  # free text: no floor
    assert float(whole.floor_N.sum()) > 0  # some legal move is under 0.4
    loss = (whole.values_N.sum() - 0.3 * whole.entropy_N.sum() + 0.2 * whole.kl_N.sum()
            + 0.5 * whole.floor_N.sum())  # fmt: skip
    g_hidden, g_head = torch.autograd.grad(loss, (hidden_NH, head.weight))
    calls.clear()
    part = head_terms(dists, hidden_NH, targets, magnet, rows=rows, floor=0.4)
    assert part.kl_N is not None and part.floor_N is not None
    loss = (part.values_N.sum() - 0.3 * part.entropy_N.sum() + 0.2 * part.kl_N.sum()
            + 0.5 * part.floor_N.sum())  # fmt: skip
    c_hidden, c_head = torch.autograd.grad(loss, (hidden_NH, head.weight))
    for a, b in [(whole.values_N, part.values_N), (whole.entropy_N, part.entropy_N),
                 (whole.kl_N, part.kl_N), (whole.floor_N, part.floor_N),
                 (g_hidden, c_hidden), (g_head, c_head)]:  # fmt: skip
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    chunks = -(-7 // rows)
    # Checkpointed when chunked: each chunk's head runs again in the backward pass.
    assert len(calls) == (1 if rows >= 7 else 2 * chunks)


def test_without_a_magnet_there_is_no_kl() -> None:
    _, hidden_NH, targets, dists, _, _ = _problem()
    terms = head_terms(dists, hidden_NH, targets, None, rows=2)
    assert terms.kl_N is None and terms.floor_N is None
    floored = head_terms(dists, hidden_NH, targets, None, rows=2, floor=0.3)
    assert floored.kl_N is None and floored.floor_N is not None


def test_a_chunk_holds_the_byte_budget() -> None:
    assert chunk_rows(151936) == 441 and chunk_rows(49152) == 1365
    assert chunk_rows(10**12) == 1


@pytest.mark.parametrize("kl_reference", ["uniform", "reference"])
def test_the_learners_gradient_does_not_depend_on_the_chunk(
    tiny_llama: Path, kl_reference: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4, device="cpu"))
    for _, p in learner._named_trainable():  # LoRA B starts at zero: make it matter
        torch.nn.init.normal_(p, std=0.05)
    datums = sample_agreement_datums(learner, 0, 1.0)
    reg = Regularizer(0.1, 0.2, kl_reference, move_floor=0.3, move_floor_coef=0.1)

    def step() -> tuple[dict[str, float], dict[str, torch.Tensor]]:
        metrics = learner.forward_backward(datums, is_loss, reg)
        grads = {n: p.grad.clone() for n, p in learner._named_trainable()}
        learner.model.zero_grad(set_to_none=True)
        return metrics, grads

    whole, g_whole = step()
    monkeypatch.setattr(log_probs_module, "chunk_rows", lambda vocab: 3)
    part, g_part = step()
    for name, grad in g_whole.items():
        torch.testing.assert_close(g_part[name], grad, atol=1e-5, rtol=0)
    assert whole["move_floor_deficit"] > 0  # the floor reached the step
    for key in ("loss", "entropy", "kl_to_magnet", "reg_loss", "move_floor_deficit"):
        assert part[key] == pytest.approx(whole[key], rel=1e-5, abs=1e-7)
