"""graphs.py's static-buffer decode step, run eagerly on a CPU (the code a CUDA graph
replays): the eager packed step's logits through a branch and an ended row, the same
tokens through the sampler, a kept decoder reused by later calls and freed with its
weights, and a full cache refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from spiral.engines.base import SamplingParams
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.decode import GRAPH_SLOT, PackedDecoder, drop_packed, packed_weights
from spiral.engines.torch.graphs import (
    StaticDecoder,
    capacity_for,
    padded_size,
    span_for,
    static_decoder,
    step_decoder,
)
from spiral.engines.torch.learner import TorchLearner
from spiral.engines.torch.prefill import prefill
from spiral.engines.torch.runahead import run_ahead
from spiral.engines.torch.sampler_rows import eval_mode
from spiral.engines.torch.snapshots import TRAINED

from .conftest import PROMPT_TEXTS, chat_prompts, move_constraint
from .test_decode import loaded


def test_sizes_and_capacities() -> None:
    assert [padded_size(n) for n in (1, 2, 3, 5, 16, 17, 512, 600)] == [
        1, 2, 4, 8, 16, 32, 512, 600,
    ]  # fmt: skip
    assert capacity_for(100, 8) == 256 and capacity_for(250, 6) == 256
    assert capacity_for(250, 7) == 512


def _both(model, tok, steps: int = 6) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Logits of the eager packed step and the static one, fed the same tokens; at step 2
    row 0 branches into two and row 3 ends, at step 4 two rows end (a smaller size)."""
    prompts = chat_prompts(tok, PROMPT_TEXTS)  # different lengths: left padding
    with eval_mode(model):
        pres = [prefill(model, prompts, 0, tok.pad_token_id, None, logits_to_keep=1) for _ in "ab"]
        weights = packed_weights(model, TRAINED)
        assert weights is not None
        eager = PackedDecoder(weights, pres[0], steps)
        static = static_decoder(model, weights, pres[1], steps, TRAINED, capture=False)
        assert isinstance(static, StaticDecoder) and static.rows_max == padded_size(len(prompts))
        ids_B = pres[0].out.logits[:, -1].argmax(-1)
        pairs = []
        for step in range(steps):
            index_B = {2: [0, 0, 2, 1], 4: [1, 3]}.get(step)
            if index_B is not None:
                index = torch.tensor(index_B)
                eager.select(index)
                static.select(index)
                ids_B = ids_B[index]
                ids_B[-1] = (ids_B[-1] + 1) % len(tok)
            a, b = eager.step(ids_B).float(), static.step(ids_B).float()
            pairs.append((a, b))
            ids_B = a.argmax(-1)
    return pairs


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_the_static_step_is_the_eager_step(arch: str, tiny_llama: Path, tiny_qwen3: Path) -> None:
    model, tok = loaded({"llama": tiny_llama, "qwen3": tiny_qwen3}[arch], "float32")
    pairs = _both(model, tok)
    assert [a.shape[0] for a, _ in pairs] == [4, 4, 4, 4, 2, 2]
    for a, b in pairs:  # attention over the whole capacity, masked: equal to rounding
        torch.testing.assert_close(b, a, atol=1e-4, rtol=0)
        assert torch.equal(a.argmax(-1), b.argmax(-1))


def _assert_same_completions(got: list, expected: list) -> None:
    """Token for token, with the same stop reasons and log-probs to rounding."""
    assert [c.tokens for c in got] == [c.tokens for c in expected]
    assert [c.stop_reason for c in got] == [c.stop_reason for c in expected]
    torch.testing.assert_close(
        torch.tensor([v for c in got for v in c.logprobs]),
        torch.tensor([v for c in expected for v in c.logprobs]),
        atol=1e-4, rtol=0,
    )  # fmt: skip


def test_the_sampler_draws_the_same_tokens_through_it(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sampler as it runs on CUDA (the static decoder, kept across calls), here
    without capture: the same completions as the eager packed step, on two calls."""
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4, dtype="float32", seed=0))
    prompts = chat_prompts(learner.tokenizer, PROMPT_TEXTS) * 2
    cons = [None, move_constraint(learner.tokenizer, 3)] * (len(prompts) // 2)
    params = [SamplingParams(max_tokens=24, temperature=1.0, seed=s) for s in (3, 4)]
    sampler = learner.sampler()
    eager = [sampler.sample(prompts, p, cons) for p in params]

    def on_static(model, pre, room, adapter):  # what step_decoder picks on CUDA
        weights = packed_weights(model, adapter, rows=len(pre.mask_BK))
        return static_decoder(model, weights, pre, room, adapter, capture=False)

    monkeypatch.setattr("spiral.engines.torch.sampler.step_decoder", on_static)
    static = [sampler.sample(prompts, p, cons) for p in params]
    kept = learner.model.__dict__[GRAPH_SLOT][TRAINED]
    for a, b in zip(eager, static, strict=True):
        _assert_same_completions(b, a)
    lengths = {len(c.tokens) for c in static[0]}
    assert len(lengths) > 1 and max(lengths) > 4  # rows ended at different steps
    assert learner.model.__dict__[GRAPH_SLOT][TRAINED] is kept  # reused by the second call
    drop_packed(learner.model)  # freed with its weights (the learner does before learning)
    assert not learner.model.__dict__[GRAPH_SLOT]


def test_a_full_static_cache_is_an_error(tiny_llama: Path) -> None:
    model, tok = loaded(tiny_llama, "float32")
    prompts = chat_prompts(tok, PROMPT_TEXTS[:2])
    with eval_mode(model):
        pre = prefill(model, prompts, 0, tok.pad_token_id, None, logits_to_keep=1)
        weights = packed_weights(model, TRAINED)
        width = int(pre.mask_BK.shape[1])
        decoder = static_decoder(model, weights, pre, 1, TRAINED, capture=False)
        ids_B = torch.tensor([5, 6])
        for _ in range(decoder.capacity - width):
            decoder.step(ids_B)
        with pytest.raises(RuntimeError, match="decode cache is full"):
            decoder.step(ids_B)


def test_on_a_cpu_the_packed_step_stays_eager(tiny_llama: Path) -> None:
    model, tok = loaded(tiny_llama, "float32")
    with eval_mode(model):
        pre = prefill(model, chat_prompts(tok, PROMPT_TEXTS), 0, tok.pad_token_id, None)
        assert isinstance(step_decoder(model, pre, 64, TRAINED), PackedDecoder)


def test_sampled_free_text_runs_ahead_with_the_tree_decodes_tokens(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the static decoder, sampled free text runs ahead of the host (runahead.py):
    the same completions as the tree decode, rows stopped by a stop string and by the
    length inside a block, and the ended rows dropped once the padded size shrinks."""
    learner = TorchLearner(ModelConfig(str(tiny_llama), lora_rank=4, dtype="float32", seed=0))
    prompts = chat_prompts(learner.tokenizer, PROMPT_TEXTS) * 3  # groups of three rows
    params = SamplingParams(max_tokens=20, temperature=1.0, seed=7, stop=("e",))
    sampler = learner.sampler()
    tree = sampler.sample(prompts, params)

    calls: list[int] = []
    sizes: list[int] = []

    def on_static(model, pre, room, adapter):
        weights = packed_weights(model, adapter, rows=len(pre.mask_BK))
        decoder = static_decoder(model, weights, pre, room, adapter, capture=False)
        select = decoder.select

        def recorded(index_B: torch.Tensor) -> None:
            sizes.append(int(index_B.shape[0]))
            select(index_B)

        monkeypatch.setattr(decoder, "select", recorded)
        return decoder

    def counted(*args, **kwargs):
        calls.append(1)
        return run_ahead(*args, **kwargs)

    monkeypatch.setattr("spiral.engines.torch.sampler.step_decoder", on_static)
    monkeypatch.setattr("spiral.engines.torch.sampler.run_ahead", counted)
    monkeypatch.setattr("spiral.engines.torch.runahead.RUN_AHEAD", 4)
    ahead = sampler.sample(prompts, params)
    assert calls == [1]
    _assert_same_completions(ahead, tree)
    assert {c.stop_reason for c in tree} >= {"stop", "length"}
    assert len({len(c.tokens) for c in tree}) > 2
    assert sizes[0] == len(prompts)  # every row its own cache row from the start
    assert len(sizes) > 1 and sizes == sorted(set(sizes), reverse=True)  # shrunk, never grown


def test_the_step_reads_only_the_filled_span_of_a_long_cache(tiny_llama: Path) -> None:
    """A cache made for 300 new tokens (capacity 512) is read over its first 256 columns
    until the rows pass them, then over 512: the eager step's logits on either side."""
    assert span_for(1, 512) == 256 and span_for(256, 512) == 256
    assert span_for(257, 512) == 512 and span_for(900, 512) == 512
    model, tok = loaded(tiny_llama, "float32")
    prompts = chat_prompts(tok, PROMPT_TEXTS[:2])
    with eval_mode(model):
        pres = [prefill(model, prompts, 0, tok.pad_token_id, None, logits_to_keep=1) for _ in "ab"]
        weights = packed_weights(model, TRAINED)
        eager = PackedDecoder(weights, pres[0], 300)
        static = static_decoder(model, weights, pres[1], 300, TRAINED, capture=False)
        assert static.capacity == 512
        ids_B = pres[0].out.logits[:, -1].argmax(-1)
        for _ in range(300 - 1):
            a, b = eager.step(ids_B), static.step(ids_B)
            torch.testing.assert_close(b, a, atol=1e-4, rtol=0)
            ids_B = a.argmax(-1)
    assert static.spans == {256, 512}


@pytest.mark.usefixtures("half_precision")
def test_the_step_profile_benchmark_runs_and_sorts_kernels(tiny_qwen3: Path) -> None:
    """benchmarks/graph_step_profile.py on a CPU (its dry run): a step time, the operators
    summed by kind, and the bound; the kinds read off real CUDA kernel names."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "graph_step_profile.py"
    spec = importlib.util.spec_from_file_location("graph_step_profile", path)
    assert spec is not None and spec.loader is not None
    profile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(profile)
    assert (
        profile.kind_of("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == "products"
    )
    assert profile.kind_of("fmha_cutlassF_bf16_aligned_64x64_rf_sm80") == "attention"
    assert profile.kind_of("void at::native::reduce_kernel<512, 1>") == "reductions"
    assert profile.kind_of("void at::native::vectorized_elementwise_kernel<4>") == "elementwise"
    assert profile.kind_of("Memcpy DtoD (Device -> Device)") == "copies"
    model, tok = loaded(tiny_qwen3, "bfloat16")
    run = profile.profile_rows(model, tok, 2, bandwidth=1e10)
    assert run["eager_step_ms"] > 0 and run["bound_ms"] > 0
    assert run["kernels_total_ms"] > 0 and min(run["kernels_ms"].values()) > 0
    assert run["kernels_ms"].get("attention", 0) > 0
