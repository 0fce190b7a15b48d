"""The torch engine on a CUDA device (marker `gpu`; skipped without one): bf16 sampler
and learner agree, gradient checkpointing leaves the gradient unchanged, `spiral train`
runs a few bf16 steps, and a model of a real shape (Qwen3) builds on the GPU.

Run on a GPU machine by `benchmarks/gpu-checks.sh` (see that script); without a GPU they
are collected and skipped. `SPIRAL_GPU_TEST_DEVICE=cpu pytest -m gpu tests/engines/test_gpu.py`
dry-runs their logic on the CPU."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

from spiral.engines.loading import ModelConfig
from spiral.engines.torch.learner import TorchLearner

from .conftest import is_loss, max_gap, sample_agreement_datums

DEVICE = os.environ.get("SPIRAL_GPU_TEST_DEVICE", "cuda")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        DEVICE.startswith("cuda") and not torch.cuda.is_available(), reason="needs a CUDA device"
    ),
]

BF16_TOLERANCE = 0.05  # the CPU bf16 test's bound (test_logprob_agreement.py)
SHAPES = Path(__file__).resolve().parents[2] / "benchmarks" / "model-shapes"


@pytest.mark.parametrize("rank", [4, 0])
def test_bf16_sampler_and_learner_agree_on_cuda(tiny_qwen3: Path, rank: int) -> None:
    cfg = ModelConfig(str(tiny_qwen3), lora_rank=rank, device=DEVICE, dtype="bfloat16")
    learner = TorchLearner(cfg, micro_batch_tokens=100)
    assert learner.model.device.type == DEVICE.split(":")[0]
    learner.temperature = 0.8
    datums = sample_agreement_datums(learner, 0, 0.8)
    assert max_gap(learner, datums) < BF16_TOLERANCE
    metrics = learner.forward_backward(datums, is_loss)
    assert abs(metrics["ratio"] - 1.0) < BF16_TOLERANCE / 5
    learner.optim_step(1e-2)
    assert max_gap(learner, sample_agreement_datums(learner, 1, 0.8)) < BF16_TOLERANCE


def test_packed_decode_agrees_with_the_models_forward_on_cuda(tiny_qwen3: Path) -> None:
    """decode.py's step on the GPU (plain products over concatenated weights, sdpa):
    the model's logits to bf16 rounding, through a branch and an ended row (on a CPU in
    bf16 it is bit for bit, test_decode.py)."""
    from .test_decode import loaded, run_both

    model, tok = loaded(tiny_qwen3, "bfloat16", device=DEVICE)
    for a, b in run_both(model, tok):
        scale = float(a.abs().max())
        torch.testing.assert_close(b, a, rtol=0.0, atol=0.03 * scale)
        assert (a.argmax(-1) == b.argmax(-1)).float().mean() >= 0.75


def test_gradient_checkpointing_on_cuda_gives_the_same_gradient(tiny_qwen3: Path) -> None:
    grads = []
    for checkpointing in (False, True):
        cfg = ModelConfig(
            str(tiny_qwen3),
            lora_rank=4,
            device=DEVICE,
            dtype="float32",
            gradient_checkpointing=checkpointing,
            seed=0,
        )
        learner = TorchLearner(cfg)
        learner.forward_backward(sample_agreement_datums(learner, 0, 1.0), is_loss)
        grads.append({n: p.grad.clone() for n, p in learner._named_trainable()})
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, rtol=1e-4, atol=1e-6)


def test_spiral_train_runs_bf16_steps_on_cuda(tiny_qwen3: Path, tmp_path: Path) -> None:
    from spiral.train.run import main

    run = tmp_path / "run"
    code = main(
        [
            f"model_name={tiny_qwen3}",
            "env_ids=KuhnPokerSingle-v0",
            "answer_format=constrained",
            "template=chat",
            f"device={DEVICE}",
            "dtype=bfloat16",
            "batch_size=16",
            "max_tokens=8",
            "max_steps=3",
            "eval_every=0",
            f"log_path={run}",
        ]
    )
    assert code == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row in rows:
        assert math.isfinite(row["train/loss"])
        assert not row.get("train/skipped_nonfinite")
    assert (run / "checkpoints" / "step_000003").is_dir()


@pytest.mark.parametrize("shape", ["qwen3-0.6b.json", "qwen3-4b.json"])
def test_a_model_of_a_real_shape_builds_on_cuda_and_trains(shape: str, tmp_path: Path) -> None:
    from spiral.testing import make_shaped_model

    folder = make_shaped_model(
        SHAPES / shape, tmp_path / "model", device=DEVICE, num_hidden_layers=2
    )
    learner = TorchLearner(ModelConfig(str(folder), lora_rank=8, device=DEVICE, dtype="bfloat16"))
    assert learner.model.config.vocab_size == 151936
    metrics = learner.forward_backward(sample_agreement_datums(learner, 0, 1.0), is_loss)
    assert math.isfinite(metrics["loss"])
    learner.optim_step(1e-4)


def test_full_fine_tuning_keeps_its_updates_on_cuda(tiny_qwen3: Path) -> None:
    """`dtype=auto` on CUDA with full fine-tuning: fp32 master weights computed under bf16
    autocast, so an update at lr 1e-6 moves (nearly) every weight that has a gradient."""
    from spiral.engines.torch.precision import compute_dtype

    dtype = "auto" if DEVICE.startswith("cuda") else "bfloat16"  # auto is fp32 on a CPU
    learner = TorchLearner(ModelConfig(str(tiny_qwen3), lora_rank=0, device=DEVICE, dtype=dtype))
    assert {p.dtype for p in learner.model.parameters()} == {torch.float32}
    assert compute_dtype(learner.model) == torch.bfloat16
    datums = sample_agreement_datums(learner, 0, 1.0)
    before = {n: p.detach().clone() for n, p in learner._named_trainable()}
    learner.forward_backward(datums, is_loss)
    has_grad = {n: p.grad != 0 for n, p in learner._named_trainable() if p.grad is not None}
    learner.optim_step(1e-6)
    moved = sum(
        int(((p.detach() - before[n]) != 0)[has_grad[n]].sum())
        for n, p in learner._named_trainable()
    )
    total = sum(int(mask.sum()) for mask in has_grad.values())
    assert total > 0 and moved / total > 0.99


def test_graph_replay_is_the_eager_static_step_on_cuda(tiny_qwen3: Path) -> None:
    """graphs.py: the decode step replayed as CUDA graphs gives the logits of the same
    static step run eagerly, through a branch (more rows: buffers grown, graphs captured
    again) and ended rows (a smaller captured size)."""
    from spiral.engines.torch.decode import packed_weights
    from spiral.engines.torch.graphs import StaticDecoder, capacity_for
    from spiral.engines.torch.prefill import prefill
    from spiral.engines.torch.sampler_rows import eval_mode
    from spiral.engines.torch.snapshots import TRAINED

    from .conftest import PROMPT_TEXTS, chat_prompts
    from .test_decode import loaded

    model, tok = loaded(tiny_qwen3, "bfloat16", device=DEVICE)
    prompts = chat_prompts(tok, PROMPT_TEXTS)
    with eval_mode(model):
        pre = prefill(model, prompts, 0, tok.pad_token_id, None, logits_to_keep=1)
        weights = packed_weights(model, TRAINED)
        assert weights is not None
        capacity = capacity_for(int(pre.mask_BK.shape[1]), 8)
        dtype = pre.cache.layers[0].keys.dtype
        eager = StaticDecoder(weights, len(prompts), capacity, dtype, capture=False)
        graphs = StaticDecoder(weights, len(prompts), capacity, dtype, capture=DEVICE != "cpu")
        for decoder in (eager, graphs):
            decoder.load(prefill(model, prompts, 0, tok.pad_token_id, None, logits_to_keep=1))
        ids_B = pre.out.logits[:, -1].argmax(-1)
        for step in range(8):
            index = {2: [0, 0, 1, 1, 2, 2, 3, 3], 5: [1, 6]}.get(step)
            if index is not None:
                index_B = torch.tensor(index, device=ids_B.device)
                eager.select(index_B)
                graphs.select(index_B)
                ids_B = ids_B[index_B]
            a, b = eager.step(ids_B).float(), graphs.step(ids_B).float()
            torch.testing.assert_close(b, a, atol=1e-2 * float(a.abs().max()), rtol=0)
            ids_B = a.argmax(-1)
    if DEVICE != "cpu":
        assert graphs.captures >= 3  # sizes 4, then 8 after growing, then 2


def test_sampled_free_text_runs_ahead_over_graphs_on_cuda(
    tiny_qwen3: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """runahead.py over replayed graphs: the completions of the tree decode (same seeds),
    which reads every token back; fp32, so only a rare near-tie may draw differently."""
    from spiral.engines.base import SamplingParams
    from spiral.engines.torch import runahead

    from .conftest import PROMPT_TEXTS, chat_prompts

    calls: list[int] = []

    def counted(*args, **kwargs):
        calls.append(1)
        return runahead.run_ahead(*args, **kwargs)

    monkeypatch.setattr("spiral.engines.torch.sampler.run_ahead", counted)
    learner = TorchLearner(
        ModelConfig(str(tiny_qwen3), lora_rank=4, device=DEVICE, dtype="float32")
    )
    prompts = chat_prompts(learner.tokenizer, PROMPT_TEXTS) * 8
    params = SamplingParams(max_tokens=40, temperature=1.0, seed=11)
    sampler = learner.sampler()
    ahead = sampler.sample(prompts, params)
    assert calls if DEVICE != "cpu" else not calls  # graphs (and so run-ahead) on CUDA only
    sampler.run_ahead = False
    tree = sampler.sample(prompts, params)
    same = [a.tokens == b.tokens for a, b in zip(ahead, tree, strict=True)]
    assert sum(same) >= 0.9 * len(same)
    for a, b, equal in zip(ahead, tree, same, strict=True):
        if equal:
            assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-3


def test_micro_batches_are_sized_to_the_free_memory_on_cuda(tiny_qwen3: Path) -> None:
    """`micro_batch_tokens=0` on a GPU: a budget from the free memory (memory.py), and a
    step of more rows than one micro-batch holds runs within it."""
    from spiral.engines.torch.memory import MAX_TOKENS, STEP

    cfg = ModelConfig(str(tiny_qwen3), lora_rank=4, device=DEVICE, dtype="bfloat16")
    learner = TorchLearner(cfg, micro_batch_tokens=0)
    metrics = learner.forward_backward(sample_agreement_datums(learner, 0, 1.0), is_loss)
    assert math.isfinite(metrics["loss"])
    budget = learner.micro_batch_tokens  # sized at the step's start
    assert STEP <= budget <= MAX_TOKENS and budget % STEP == 0
    if DEVICE != "cpu":  # a tiny model on a GPU: every micro-batch as large as allowed
        assert budget == MAX_TOKENS


def test_left_padded_rows_of_different_lengths_have_finite_gradients_on_cuda(
    tiny_qwen3: Path,
) -> None:
    """Rows run whole and left-padded (no prefix sharing, as under gradient
    checkpointing): finite gradients, those of the same rows packed without padding."""
    import random

    from spiral.types import Datum

    cfg = ModelConfig(str(tiny_qwen3), lora_rank=4, device=DEVICE, dtype="bfloat16")
    learner = TorchLearner(cfg, micro_batch_tokens=4096)
    learner.share_prefix = False
    rng = random.Random(0)
    vocab = len(learner.tokenizer)
    datums = []
    for n in (8, 20, 33, 47):
        ids = [rng.randrange(10, vocab - 10) for _ in range(n + 1)]
        datums.append(Datum(tuple(ids[:-1]), tuple(ids[1:]), (-1.0,) * n, (1.0,) * n, (1.0,) * n))
    grads = []
    for pack in (False, True):
        learner.pack_rows = pack
        learner.forward_backward(datums, is_loss)
        grads.append({n: p.grad.float().clone() for n, p in learner._named_trainable()})
        learner.model.zero_grad(set_to_none=True)
    for name, padded in grads[0].items():
        assert torch.isfinite(padded).all(), name
        scale = float(padded.abs().max()) or 1.0
        assert float((padded - grads[1][name]).abs().max()) <= 0.05 * scale, name
