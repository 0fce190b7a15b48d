"""Tiny real models for your own tests: a BPE tokenizer trained on game text plus a
random-init LM, written as a Hugging Face folder in about a second, with no download.

    from spiral.testing import make_tiny_model
    model = make_tiny_model(tmp_path / "model")      # then model=... in any command

The public makers are `make_tiny_model` and `make_shaped_model` (`__all__`); the rest is
how they are built. The test suite's own fixtures (session-wide tiny models, CPU dtype
settings, read-only folders) live in `tests/conftest.py`, not here.

`make_tiny_model(path)` writes a genuine Hugging Face folder (config.json,
model.safetensors, tokenizer.json, tokenizer_config.json with a ChatML chat template), so
every code path that loads a hub model (`from_pretrained`, PEFT, our sampler and learner)
runs unchanged on it. `make_shaped_model(config_file, path)` gives a random-init model of
a real architecture's shape (`benchmarks/model-shapes/*.json`) for throughput and memory
where weights cannot be downloaded.

Choices:
- Byte-level BPE (like GPT-2/Llama-3/Qwen): any string round-trips, so tests may feed
  arbitrary text. The vocabulary is small (`vocab_size`, default 512) to keep the output
  layer cheap; game tokens such as "[4]" or "[bet]" are learned as merges by the corpus.
- Special tokens follow ChatML/SmolLM2: `<|endoftext|>` (pad), `<|im_start|>` (bos),
  `<|im_end|>` (eos, which ends an assistant turn).
- Weights are random (seeded) with a wider init than usual (std 0.1 instead of 0.02) so
  next-token distributions are far from uniform and log-prob tests are not trivially met.
- Nothing of spiral is imported (torch, transformers and tokenizers only, on call), so
  a maker never changes with the product it tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

__all__ = ["make_shaped_model", "make_tiny_model"]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def default_corpus() -> list[str]:
    """Game-like and chat-like text: boards, bracketed moves, poker actions, plain words."""
    words = (
        "you are playing a game of tic tac toe kuhn poker liars dice against an opponent. "
        "the board is shown below. it is your turn. think step by step and then give your "
        "move in the format \\boxed{[4]}. valid moves are listed. you win if you get three "
        "in a row. the player with the higher card wins the pot. answer: I will play "
        "because my opponent might bet, so I should call or fold. hello, how are you? "
        "I am fine, thank you. the capital of France is Paris. what is 2 + 2? it is 4."
    )
    lines = [words, words.upper(), words.capitalize()]
    for k in range(9):
        lines.append(f"[{k}] \\boxed{{[{k}]}} Answer: [{k}] I play [{k}].")
    for action in ("check", "bet", "fold", "call"):
        lines.append(f"[{action}] \\boxed{{[{action}]}} Answer: [{action}] I {action}.")
    marks = "XO "
    for seed in range(30):
        cells = [marks[(seed * 7 + i * 5 + i * i) % 3] for i in range(9)]
        rows = [" | ".join(cells[r * 3 : r * 3 + 3]) for r in range(3)]
        lines.append("\n---------\n".join(rows))
    lines.append("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n")
    lines.append("<|im_start|>user\nYour move.<|im_end|>\n<|im_start|>assistant\n[4]<|im_end|>")
    return lines


def _train_tokenizer(corpus: list[str], vocab_size: int, out_dir: Path) -> int:
    """Train byte-level BPE, save it as a transformers fast tokenizer; return vocab size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    fast.chat_template = CHATML_TEMPLATE
    fast.save_pretrained(str(out_dir))
    return len(fast)


def _model_config(
    arch: str, vocab: int, hidden: int, layers: int, ids: dict[str, int], head_dim: int = 16
) -> object:
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    heads = max(1, hidden // head_dim)
    common = dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=4096,
        initializer_range=0.1,
        tie_word_embeddings=False,
        **ids,
    )
    config_cls = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}[arch]
    if arch == "qwen3":
        common["head_dim"] = hidden // heads
    return config_cls(**common)


def make_tiny_model(
    path: Path,
    arch: Literal["llama", "qwen2", "qwen3"] = "llama",
    hidden: int = 64,
    layers: int = 2,
    seed: int = 0,
    corpus: list[str] | None = None,
    vocab_size: int = 512,
    head_dim: int = 16,
) -> Path:
    """Write a tiny random-init causal LM with a trained tokenizer to `path`; return it.
    (vLLM's CPU attention needs head_dim >= 32.)"""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    if arch not in ("llama", "qwen2", "qwen3"):
        raise ValueError(f"arch must be 'llama', 'qwen2' or 'qwen3', got {arch!r}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    vocab = _train_tokenizer(corpus or default_corpus(), vocab_size, path)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    ids = {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    config = _model_config(arch, vocab, hidden, layers, ids, head_dim)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(str(path))
    GenerationConfig(**ids).save_pretrained(str(path))
    (path / "spiral_tiny.json").write_text(
        json.dumps(
            {"arch": arch, "hidden": hidden, "layers": layers, "seed": seed, "head_dim": head_dim}
        )
        + "\n"
    )
    return path


def make_shaped_model(
    config_file: Path,
    path: Path,
    device: str = "cpu",
    dtype: str = "bfloat16",
    seed: int = 0,
    **overrides: int,
) -> Path:
    """A random-init model of a real architecture's shape (a Hugging Face config.json such
    as `benchmarks/model-shapes/qwen3-4b.json`) with the tiny trained tokenizer, written
    to `path`: throughput and memory of e.g. Qwen3-4B on a machine that cannot download
    its weights. Built on `device` (a GPU initialises billions of weights in seconds);
    `overrides` replace config fields (e.g. `num_hidden_layers=2` for a quick test).
    The tokenizer's ids are a small corner of the real vocabulary; the output layer still
    has the real vocabulary's size, so its cost is real."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    _train_tokenizer(default_corpus(), 512, path)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    ids = {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    fields = json.loads(Path(config_file).read_text())
    fields.update(ids)
    fields.update(overrides)
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    torch.manual_seed(seed)
    torch_dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config).to(torch_dtype)
    model.save_pretrained(str(path))
    GenerationConfig(**ids).save_pretrained(str(path))
    return path
