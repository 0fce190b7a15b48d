"""A model folder whose config.json, weights and tokenizer describe different models is
refused in one line naming the folder and the mismatch, for every command that loads
it; the model's context length bounds every prompt and reply the torch sampler makes."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from spiral.cli import main as cli_main
from spiral.engines.base import SamplingParams
from spiral.engines.loading import DamagedModelFolder, ModelConfig
from spiral.engines.torch.loading import load_model_and_tokenizer
from spiral.engines.torch.sampler import TorchSampler
from spiral.engines.torch.sampler_rows import ContextLengthError
from spiral.testing import make_tiny_model
from spiral.types import AnswerConstraint


def _edited(model: Path, folder: Path, **fields: Any) -> Path:
    """A copy of `model` whose config.json has `fields` changed."""
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(model, folder)
    config = folder / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), **fields}))
    return folder


def _one_line(err: str) -> str:
    err = err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def _load(folder: Path, lora_rank: int = 4) -> tuple[Any, Any]:
    return load_model_and_tokenizer(
        ModelConfig(model=str(folder), lora_rank=lora_rank, device="cpu")
    )


@pytest.mark.parametrize("layers", [1, 3])
def test_a_config_whose_layer_count_differs_from_the_weights_stops_eval_in_one_line(
    tiny_llama: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], layers: int
) -> None:
    """The weights hold 2 layers: a config of 1 used to load a 1-layer model and play on
    with it (exit 0); one of 3 is refused naming both counts too."""
    folder = _edited(tiny_llama, tmp_path / "model", num_hidden_layers=layers)
    capsys.readouterr()
    assert cli_main(["eval", f"checkpoint={folder}", "opponents=random", "games=1"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"config.json declares {layers} layer(s)" in err
    assert f"{folder / 'model.safetensors'} holds weights for 2" in err


def test_a_config_cut_to_fewer_layers_stops_training_in_one_line(
    tiny_llama: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: the run trained a 1-layer model, its adapter covering layer 0 only."""
    folder = _edited(tiny_llama, tmp_path / "model", num_hidden_layers=1)
    argv = ["train", f"model_name={folder}", "max_steps=1", f"log_path={tmp_path / 'run'}"]
    capsys.readouterr()
    assert cli_main([*argv, "lora_rank=4", "batch_size=2", "env_ids=KuhnPokerSingle-v0"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "declares 1 layer(s)" in err and "holds weights for 2" in err
    assert "skipping damaged checkpoint" not in err


@pytest.fixture(scope="module")
def small_vocabulary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model whose embedding has fewer rows (about 260) than tiny_llama's tokenizer."""
    return make_tiny_model(tmp_path_factory.mktemp("small") / "model", vocab_size=260)


def test_a_tokenizer_larger_than_the_embedding_is_refused_at_load(
    tiny_llama: Path, small_vocabulary: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: an IndexError traceback at the first prompt holding a token past the rows."""
    folder = tmp_path / "model"
    shutil.copytree(small_vocabulary, folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_llama / name, folder / name)
    capsys.readouterr()
    assert cli_main(["eval", f"checkpoint={folder}", "opponents=random", "games=1"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert str(folder) in err and "its tokenizer has 512 tokens" in err and "rows" in err


def test_a_tokenizer_smaller_than_the_embedding_loads(
    tiny_llama: Path, small_vocabulary: Path, tmp_path: Path
) -> None:
    """Embeddings are often padded past the tokenizer: that is no mismatch."""
    folder = tmp_path / "model"
    shutil.copytree(tiny_llama, folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(small_vocabulary / name, folder / name)
    model, tokenizer = _load(folder)
    assert len(tokenizer) < model.get_input_embeddings().num_embeddings == 512


def _prompt(tokenizer: Any, words: int) -> list[int]:
    text = " ".join(["the board is shown below"] * words)
    return list(tokenizer(text)["input_ids"])


def test_prompt_and_reply_stay_within_the_context(tiny_llama: Path, tmp_path: Path) -> None:
    """Before: a reply ran to max_tokens whatever the context (RoPE models compute past
    it, on positions they were never trained for)."""
    model, tokenizer = _load(_edited(tiny_llama, tmp_path / "model", max_position_embeddings=64))
    sampler = TorchSampler(model, tokenizer)
    prompts = [_prompt(tokenizer, 4), _prompt(tokenizer, 1)]
    assert all(len(p) < 40 for p in prompts)
    eos_free = SamplingParams(max_tokens=200, temperature=1.0, seed=0, stop=())
    sampler.eos_ids = frozenset({-1})  # no reply ends early: every row meets its budget
    done = sampler.sample(prompts, eos_free)
    for prompt, reply in zip(prompts, done, strict=True):
        assert len(prompt) + len(reply.tokens) == 64 and reply.stop_reason == "length"
    choices = tuple(tuple(tokenizer(f"[{k}]")["input_ids"]) for k in range(3))
    thinking = AnswerConstraint(choices=choices, marker=(), think_budget=500)
    (answer,) = sampler.sample([prompts[0]], eos_free, [thinking])
    assert len(prompts[0]) + len(answer.tokens) <= 64 and answer.stop_reason == "stop"
    with pytest.raises(ContextLengthError, match="context of 64 tokens") as refused:
        sampler.sample([_prompt(tokenizer, 40)], eos_free)
    assert "\n" not in str(refused.value)


def test_a_context_shorter_than_the_games_prompt_stops_eval_in_one_line(
    tiny_llama: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _edited(tiny_llama, tmp_path / "model", max_position_embeddings=16)
    capsys.readouterr()
    assert cli_main(["eval", f"checkpoint={folder}", "opponents=random", "games=1"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "context of 16 tokens" in err and "max_position_embeddings" in err


@pytest.fixture(scope="module")
def deep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A 3-layer tiny model, and a scratch folder the generated cases rewrite."""
    root = tmp_path_factory.mktemp("deep")
    model = make_tiny_model(root / "model", layers=3, hidden=32)
    scratch = Path(tempfile.mkdtemp(prefix="spiral-mismatch-"))
    yield model, scratch / "model"
    shutil.rmtree(scratch, ignore_errors=True)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    layers=st.sampled_from([1, 2, 3, 4]),
    vocab=st.sampled_from([256, 512, 640]),
    hidden=st.sampled_from([16, 32, 64]),
    context=st.sampled_from([24, 48, 4096]),
    tied=st.booleans(),
)
@example(layers=3, vocab=512, hidden=32, context=24, tied=False)
@example(layers=3, vocab=512, hidden=32, context=4096, tied=True)
@example(layers=3, vocab=256, hidden=64, context=4096, tied=True)  # transformers fails first
def test_a_config_that_disagrees_with_its_weights_is_refused_or_loads_what_they_hold(
    deep: tuple[Path, Path], layers: int, vocab: int, hidden: int, context: int, tied: bool
) -> None:
    """The weights hold 3 layers, a 512 x 32 embedding and no context at all (rotary
    positions). A config that disagrees in layers, vocabulary or width is refused in one
    line naming the folder; one that agrees loads exactly the weights, and its context
    bounds every prompt and reply (or refuses, in one line, a prompt it cannot hold)."""
    model, folder = deep
    fields = dict(num_hidden_layers=layers, vocab_size=vocab, hidden_size=hidden)
    _edited(model, folder, **fields, max_position_embeddings=context, tie_word_embeddings=tied)
    fits = (layers, vocab, hidden) == (3, 512, 32)
    try:
        loaded, tokenizer = _load(folder, lora_rank=0)
    except DamagedModelFolder as refused:
        said = str(refused)
        assert not fits and str(folder) in said and "\n" not in said, said
        assert "mismatched or hand-edited" in said
        return
    assert fits, "a config that disagrees with the weights loaded"
    sampler = TorchSampler(loaded, tokenizer)
    prompt = _prompt(tokenizer, 3)
    try:
        (reply,) = sampler.sample([prompt], SamplingParams(max_tokens=64, seed=0))
    except ContextLengthError as refused:
        assert len(prompt) >= context and "\n" not in str(refused)
        return
    assert len(prompt) + len(reply.tokens) <= context
