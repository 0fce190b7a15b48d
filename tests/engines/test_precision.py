"""`lora_compute`: a bf16 base with fp32 adapters computes its LoRA products in bf16, with
the same outputs and gradients as PEFT's fp32 path up to bf16 rounding; a no-op elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from spiral.engines.loading import ModelConfig
from spiral.engines.torch.loading import enable_activation_checkpointing, load_model_and_tokenizer
from spiral.engines.torch.precision import lora_compute, mixed_lora

pytestmark = pytest.mark.usefixtures("half_precision")  # bf16 by name on any CPU


def _model(path: Path, dtype: str, rank: int = 4):
    torch.manual_seed(0)  # PEFT's random start of A: the same model whatever ran before
    model, tok = load_model_and_tokenizer(ModelConfig(str(path), lora_rank=rank, dtype=dtype))
    torch.manual_seed(1)
    for name, param in model.named_parameters():
        if "lora_B" in name:  # PEFT starts B at zero; make the adapter matter
            torch.nn.init.normal_(param, std=0.2)
    ids = torch.tensor([tok("your move [4] and then the board")["input_ids"]])
    return model, ids


def _run(model, ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids).logits.float()
    logits.logsumexp(-1).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


def test_which_models_are_mixed(tiny_llama: Path) -> None:
    assert mixed_lora(_model(tiny_llama, "bfloat16")[0])
    assert not mixed_lora(_model(tiny_llama, "float32")[0])
    assert not mixed_lora(_model(tiny_llama, "bfloat16", rank=0)[0])


def test_a_no_op_in_fp32(tiny_llama: Path) -> None:
    model, ids = _model(tiny_llama, "float32")
    plain_logits, plain_grads = _run(model, ids)
    with lora_compute(model):
        logits, grads = _run(model, ids)
    assert torch.equal(logits, plain_logits)
    assert all(torch.equal(grads[n], g) for n, g in plain_grads.items())


def test_bf16_lora_products_match_the_fp32_path(tiny_llama: Path) -> None:
    model, ids = _model(tiny_llama, "bfloat16")
    seen: list[torch.dtype] = []
    lora_a = next(m for n, m in model.named_modules() if n.endswith("lora_A.default"))
    lora_a.register_forward_hook(lambda mod, args, out: seen.append(out.dtype))
    fp32_logits, fp32_grads = _run(model, ids)  # PEFT: the LoRA products in fp32
    with lora_compute(model):
        logits, grads = _run(model, ids)
    assert seen == [torch.float32, torch.bfloat16]  # the product really ran in bf16
    # bf16 logits of magnitude ~2 are spaced 0.0156 apart: a few steps of rounding
    assert (logits - fp32_logits).abs().max() < 0.1
    assert set(grads) == set(fp32_grads) and grads
    for name, grad in grads.items():
        assert grad.dtype == torch.float32  # the adapter's own weights keep fp32
        reference = fp32_grads[name]
        assert (grad - reference).norm() <= 0.05 * reference.norm() + 1e-6, name


def test_only_the_adapters_change_and_are_restored(tiny_llama: Path) -> None:
    model, ids = _model(tiny_llama, "bfloat16")
    lora_a = next(m for n, m in model.named_modules() if n.endswith("lora_A.default"))
    layer = next(m for n, m in model.named_modules() if n.endswith("q_proj"))
    head = torch.nn.Linear(4, 4)  # an fp32 module computed inside the block
    with lora_compute(model):
        assert "forward" in vars(lora_a) and not layer.cast_input_dtype_enabled
        assert head(torch.randn(2, 4)).dtype == torch.float32  # no block-wide autocast
        with lora_compute(model):  # re-entered: the outer block keeps ownership
            pass
        assert "forward" in vars(lora_a)
    assert "forward" not in vars(lora_a) and layer.cast_input_dtype_enabled
    assert lora_a(torch.randn(2, lora_a.in_features)).dtype == torch.float32


def test_left_alone_under_activation_checkpointing(tiny_llama: Path) -> None:
    model, ids = _model(tiny_llama, "bfloat16")
    enable_activation_checkpointing(model)
    model.train()
    plain_logits, plain_grads = _run(model, ids)
    with lora_compute(model):  # the recomputation runs outside the block: PEFT's fp32 path
        logits, grads = _run(model, ids)
    assert torch.equal(logits, plain_logits)
    assert all(torch.equal(grads[n], g) for n, g in plain_grads.items())
