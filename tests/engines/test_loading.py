"""Model loading: local folders, LoRA vs full, adapter and full checkpoints, tiny models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from spiral.engines.loading import ModelConfig, resolve_model_path
from spiral.engines.torch.loading import load_model_and_tokenizer


def test_model_config_defaults() -> None:
    cfg = ModelConfig("x")
    assert cfg.lora_rank == 32 and cfg.alpha == 64
    assert ModelConfig("x", lora_rank=8, lora_alpha=8).alpha == 8


def test_tiny_model_is_a_real_hf_folder(tiny_qwen3: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(str(tiny_qwen3))
    tok = AutoTokenizer.from_pretrained(str(tiny_qwen3))
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert tok.chat_template and tok.eos_token == "<|im_end|>" and tok.pad_token_id is not None
    text = "Your move. \\boxed{[4]} [bet] héllo"
    assert tok.decode(tok(text)["input_ids"]) == text
    assert len(tok("[4]")["input_ids"]) <= 3  # game tokens are learned merges, not bytes


def test_resolve_model_path(tiny_llama: Path, tmp_path: Path) -> None:
    assert resolve_model_path(str(tiny_llama)) == str(tiny_llama)
    assert resolve_model_path("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"  # a hub id, untouched
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_model_path(str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="config.json"):
        resolve_model_path(str(tmp_path))


def test_lora_and_full_trainable_parameters(tiny_llama: Path) -> None:
    lora, _ = load_model_and_tokenizer(ModelConfig(str(tiny_llama), lora_rank=4))
    trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert any("q_proj" in n for n in trainable) and any("down_proj" in n for n in trainable)
    assert not any("lm_head" in n for n in trainable)
    full, tok = load_model_and_tokenizer(ModelConfig(str(tiny_llama), lora_rank=0))
    assert all(p.requires_grad for p in full.parameters())
    assert full.dtype == torch.float32 and full.device.type == "cpu"
    assert tok.pad_token_id is not None


def test_adapter_and_full_checkpoint_folders_load(tiny_llama: Path, tmp_path: Path) -> None:
    lora, tok = load_model_and_tokenizer(ModelConfig(str(tiny_llama), lora_rank=4))
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.fill_(0.01)  # make the adapter matter
    lora.save_pretrained(str(tmp_path / "adapter"))
    tok.save_pretrained(str(tmp_path / "adapter"))
    assert json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    ids = torch.tensor([[1, 20, 30, 40]])
    lora.eval()
    with torch.no_grad():
        expected = lora(ids).logits
    again, _ = load_model_and_tokenizer(ModelConfig(str(tmp_path / "adapter"), lora_rank=4))
    merged, _ = load_model_and_tokenizer(ModelConfig(str(tmp_path / "adapter"), lora_rank=0))
    assert any(p.requires_grad and "lora_" in n for n, p in again.named_parameters())
    assert not any("lora_" in n for n, _ in merged.named_parameters())
    merged.save_pretrained(str(tmp_path / "full"))
    tok.save_pretrained(str(tmp_path / "full"))
    full, _ = load_model_and_tokenizer(ModelConfig(str(tmp_path / "full"), lora_rank=0))
    for model in (again, merged, full):
        model.eval()
        with torch.no_grad():
            assert torch.allclose(model(ids).logits, expected, atol=1e-5)


def test_auto_dtype_is_bf16_for_lora_on_a_cpu_with_native_bf16(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spiral.engines.loading import resolve_dtype
    from spiral.engines.torch import cpu as probe

    cpu = torch.device("cpu")
    monkeypatch.setattr(probe, "ASSUME", True)  # bf16 by name runs whatever this CPU has
    monkeypatch.setattr(probe, "_native_bf16", lambda: True)  # a CPU with native bf16
    assert resolve_dtype("auto", cpu) == torch.bfloat16
    assert resolve_dtype("auto", cpu, full_fine_tuning=True) == torch.float32  # master weights
    assert resolve_dtype("float32", cpu) == torch.float32
    lora, _ = load_model_and_tokenizer(ModelConfig(str(tiny_llama), lora_rank=4))
    # The frozen base in bf16, the trained adapter (and so its optimizer state) in fp32.
    assert {p.dtype for p in lora.parameters() if not p.requires_grad} == {torch.bfloat16}
    assert {p.dtype for p in lora.parameters() if p.requires_grad} == {torch.float32}
    monkeypatch.setattr(probe, "ASSUME", False)
    assert resolve_dtype("auto", cpu) == torch.float32
    with pytest.raises(ValueError, match="dtype must be"):
        resolve_dtype("fp8", cpu)


@pytest.mark.parametrize("lora_rank", [4, 0])
def test_the_output_head_gets_a_contiguous_input(tiny_llama: Path, lora_rank: int) -> None:
    """`logits_to_keep=1` slices the last position out of every row: the head must see
    that slice made contiguous (a strided input costs a copy of the vocab-sized weight
    per row), and the logits must be those of the full forward."""
    model, _ = load_model_and_tokenizer(ModelConfig(str(tiny_llama), lora_rank=lora_rank))
    seen: list[bool] = []
    model.get_output_embeddings().register_forward_pre_hook(
        lambda _m, args: seen.append(args[0].is_contiguous())
    )
    ids_BS = torch.randint(3, 100, (3, 7))
    with torch.no_grad():
        last = model(input_ids=ids_BS, logits_to_keep=1).logits
        full = model(input_ids=ids_BS).logits
    assert seen == [True, True]
    torch.testing.assert_close(last[:, 0], full[:, -1])


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_the_kv_cache_goes_by_the_name_the_forward_takes(tiny_llama: Path, lora_rank: int) -> None:
    import inspect
    import warnings

    from transformers import DynamicCache

    from spiral.engines.torch.loading import cache_kwarg

    model, _ = load_model_and_tokenizer(ModelConfig(model=str(tiny_llama), lora_rank=lora_rank))
    base = model.get_base_model() if lora_rank else model
    cache = DynamicCache()
    (name,) = cache_kwarg(model, cache)
    assert name in inspect.signature(type(base).forward).parameters
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # no deprecated keyword
        out = model(
            input_ids=torch.tensor([[1, 2, 3]]), use_cache=True, **cache_kwarg(model, cache)
        )
    assert out.logits.shape[:2] == (1, 3) and cache.get_seq_length() == 3


def test_a_model_of_a_real_shape_is_built_from_its_config_file(tmp_path: Path) -> None:
    """benchmarks/model-shapes/*.json give random-init models of real architectures (for
    throughput where weights cannot be downloaded); fields may be overridden."""
    from transformers import AutoConfig

    from spiral.engines.torch.learner import TorchLearner
    from spiral.testing import make_shaped_model

    shapes = Path(__file__).resolve().parents[2] / "benchmarks" / "model-shapes"
    wanted = json.loads((shapes / "qwen3-0.6b.json").read_text())
    folder = make_shaped_model(shapes / "qwen3-0.6b.json", tmp_path / "m", num_hidden_layers=1)
    got = AutoConfig.from_pretrained(folder)
    for key in (
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "head_dim",
        "vocab_size",
    ):
        assert getattr(got, key) == wanted[key]
    assert got.num_hidden_layers == 1
    learner = TorchLearner(ModelConfig(str(folder), lora_rank=4, dtype="float32"))
    assert learner.tokenizer.eos_token_id == got.eos_token_id  # the tiny tokenizer's ids
    assert learner.model.get_output_embeddings().weight.shape[0] == 151936
