"""In-place decode cache layers: the same keys and values as transformers' DynamicLayer,
without copying the cache at every step; the sampler's tokens and log-probs unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers.cache_utils import DynamicLayer

import spiral.engines.sampler as sampler_module
from spiral.engines.base import SamplingParams
from spiral.engines.decode_cache import RoomyLayer, make_room
from spiral.engines.loading import ModelConfig, load_model_and_tokenizer
from spiral.engines.sampler import TorchSampler

from .conftest import PROMPT_TEXTS, chat_prompts


def _kv(rows: int, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 2, n, 4, generator=g), torch.randn(rows, 2, n, 4, generator=g)


def test_roomy_layer_holds_what_the_dynamic_layer_holds() -> None:
    plain = DynamicLayer()
    plain.update(*_kv(3, 5, seed=0))
    roomy = RoomyLayer(plain.keys, plain.values, room=2)
    assert roomy.get_seq_length() == 5 and roomy.capacity == 7
    storage = roomy._keys.data_ptr()
    for step in range(6):  # past the room: the storage doubles once
        k, v = _kv(3, 1, seed=step + 1)
        pk, pv = plain.update(k, v)
        rk, rv = roomy.update(k, v)
        assert torch.equal(pk, rk) and torch.equal(pv, rv)
        assert roomy.get_seq_length() == plain.get_seq_length() == 6 + step
        if step < 2:  # within the room nothing was reallocated
            assert roomy._keys.data_ptr() == storage
    assert roomy.capacity == 14
    index = torch.tensor([2, 2, 0])  # a row ended, another branched in two
    plain.batch_select_indices(index)
    roomy.batch_select_indices(index)
    k, v = _kv(3, 1, seed=9)
    assert torch.equal(plain.update(k, v)[0], roomy.update(k, v)[0])
    assert torch.equal(plain.values, roomy.values)
    roomy.crop(-2)
    assert roomy.get_seq_length() == plain.get_seq_length() - 2
    with pytest.raises(ValueError, match="negative"):
        roomy.crop(3)


def test_make_room_changes_only_filled_plain_layers() -> None:
    class Cache:
        layers = [DynamicLayer(), DynamicLayer()]

    cache = Cache()
    cache.layers[0].update(*_kv(2, 3, seed=0))
    assert make_room(cache, 4) == 1  # the empty layer stays as it is
    assert isinstance(cache.layers[0], RoomyLayer) and type(cache.layers[1]) is DynamicLayer


@pytest.mark.parametrize("room", [2, 256])
def test_sampler_output_is_unchanged(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch, room: int
) -> None:
    """Tokens and log-probs with in-place layers (room 2 makes them grow while decoding)
    equal those of transformers' own layers, at temperature 1 with branching rows."""
    model, tokenizer = load_model_and_tokenizer(ModelConfig(str(tiny_llama), lora_rank=0))
    prompts = chat_prompts(tokenizer, PROMPT_TEXTS) * 2
    params = SamplingParams(max_tokens=9, temperature=1.0, seed=4)
    monkeypatch.setattr(sampler_module, "DECODE_ROOM", room)
    roomy = TorchSampler(model, tokenizer).sample(prompts, params)
    monkeypatch.setattr(sampler_module, "make_room", lambda cache, n: 0)
    plain = TorchSampler(model, tokenizer).sample(prompts, params)
    assert [c.tokens for c in roomy] == [c.tokens for c in plain]
    for a, b in zip(roomy, plain, strict=True):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
    assert max(len(c.tokens) for c in plain) > 2  # with room 2, the layers grew
