"""The vLLM sampler (vLLM's CPU build here, `make test-vllm`; skipped without vLLM).

A real running vLLM engine over a tiny model made here (head_dim 32: vLLM's CPU attention
needs >= 32): its log-probs agree with the torch learner's on the same LoRA weights,
free and constrained (with and without thinking); adapters are hot-swapped between
optimiser steps without restarting the engine; a whole self-play step of TicTacToe and
Kuhn Poker with constrained answers is played by it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm")

from spiral.engines.base import SamplingParams, StaleSamplerError  # noqa: E402
from spiral.engines.loading import ModelConfig  # noqa: E402
from spiral.engines.torch.learner import TorchLearner  # noqa: E402
from spiral.engines.vllm.engine import open_engine  # noqa: E402
from spiral.engines.vllm.learner import VllmSampledLearner  # noqa: E402
from spiral.types import Datum  # noqa: E402

from .conftest import (
    PROMPT_TEXTS,
    agreement_constraints,
    chat_prompts,
    is_loss,
    max_gap,
    move_constraint,
    to_datum,
)  # noqa: E402

pytestmark = pytest.mark.vllm

# vLLM's CPU kernels and torch's reduce in different orders; fp32 on both sides.
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from spiral.testing import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model", head_dim=32)


@pytest.fixture(scope="module")
def pair(model_dir: Path):  # type: ignore[no-untyped-def]
    """A torch LoRA learner and the vLLM engine that samples it (one engine per module)."""
    cfg = ModelConfig(str(model_dir), lora_rank=8, dtype="float32")
    learner = TorchLearner(cfg, micro_batch_tokens=200)
    engine, _ = open_engine(cfg, lora_rank=8, kv_cache_gb=0.5, max_model_len=4096)
    wrapped = VllmSampledLearner(learner, engine)
    yield learner, wrapped
    engine.close()


def _datums(wrapped: VllmSampledLearner, seed: int, temperature: float = 1.0) -> list[Datum]:
    tok = wrapped.tokenizer
    prompts = chat_prompts(tok, PROMPT_TEXTS)
    cons = agreement_constraints(tok)
    out = wrapped.sampler().sample(
        prompts, SamplingParams(max_tokens=12, temperature=temperature, seed=seed), cons
    )
    for completion, c in zip(out, cons, strict=True):
        if c is not None:  # the answer is one legal choice, ending the completion
            assert completion.stop_reason == "stop"
            answer = completion.tokens[completion.answer_start :]
            assert tuple(answer) in c.choices
            marker = completion.tokens[: completion.answer_start][-len(c.marker) :]
            assert tuple(marker) == c.marker or not c.marker
    return [to_datum(p, c) for p, c in zip(prompts, out, strict=True)]


def test_vllm_samples_agree_with_the_torch_learner_and_adapters_hot_swap(pair) -> None:  # type: ignore[no-untyped-def]
    learner, wrapped = pair
    engine = wrapped.engine
    llm = engine.llm
    for temperature in (1.0, 0.7):
        learner.temperature = temperature
        datums = _datums(wrapped, seed=0, temperature=temperature)
        assert any(len(d.target_ids) > 0 for d in datums)
        assert max_gap(learner, datums) < TOLERANCE
    learner.temperature = 1.0
    datums = _datums(wrapped, seed=0)
    old_sampler = wrapped.sampler()
    learner.forward_backward(datums, is_loss)
    learner.optim_step(5e-2)
    assert max_gap(learner, datums) > 10 * TOLERANCE  # the step moved the policy
    fresh = _datums(wrapped, seed=1)  # the new adapter, in the same engine
    assert wrapped.engine.llm is llm
    assert max_gap(learner, fresh) < TOLERANCE
    with pytest.raises(StaleSamplerError, match="call learner.sampler"):  # the one rule
        old_sampler.sample([[1, 2, 3]], SamplingParams(max_tokens=2))


def test_vllm_scores_like_the_torch_learner(pair) -> None:  # type: ignore[no-untyped-def]
    learner, wrapped = pair
    tok = wrapped.tokenizer
    prompts = chat_prompts(tok, PROMPT_TEXTS)
    conts = [list(tok("[4]")["input_ids"]) for _ in prompts]
    for temperature in (1.0, 0.5):
        scored = wrapped.sampler().score(prompts, conts, temperature)
        torch_scored = learner.sampler().score(prompts, conts, temperature)
        for a, b in zip(scored, torch_scored, strict=True):
            assert len(a) == len(b) == len(conts[0])
            assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < TOLERANCE
    assert wrapped.sampler().score(prompts[:1], [[]]) == [[]]


def test_seeded_rows_repeat(pair) -> None:  # type: ignore[no-untyped-def]
    _, wrapped = pair
    prompts = chat_prompts(wrapped.tokenizer, PROMPT_TEXTS)
    params = SamplingParams(max_tokens=8, seed=7)
    a = wrapped.sampler().sample(prompts, params)
    b = wrapped.sampler().sample(prompts, params)
    assert [c.tokens for c in a] == [c.tokens for c in b]


@pytest.mark.parametrize("game", ["TicTacToe-v0", "KuhnPoker-v1"])
def test_a_whole_self_play_step_with_constrained_answers(  # type: ignore[no-untyped-def]
    pair, model_dir: Path, tmp_path: Path, game: str
) -> None:
    from spiral.train.config import parse_config
    from spiral.train.setup import build_setup
    from spiral.train.step import POLICY, collect

    _, wrapped = pair
    cfg = parse_config(
        [
            f"model_name={model_dir}",
            f"env_ids={game}",
            "answer_format=constrained",
            "batch_size=4",
            "max_tokens=6",
            "template=chat",
            f"log_path={tmp_path / 'run'}",
        ]
    )
    episodes, metrics = collect(cfg, build_setup(cfg), wrapped, step=0)  # type: ignore[arg-type]
    assert len(episodes) == cfg.games_per_step
    turns = [t for ep in episodes for t in ep.turns if t.agent == POLICY and t.completion]
    assert turns and all(t.parse is not None and t.parse.ok for t in turns)
    assert all(t.completion.constraint is not None for t in turns)
    assert metrics["perf/decode_tokens"] > 0


def test_the_registry_builds_a_vllm_sampler_over_a_lora_checkpoint(  # type: ignore[no-untyped-def]
    pair, tmp_path: Path
) -> None:
    from spiral.engines import registry

    learner, _ = pair
    learner.save(tmp_path / "ckpt")  # a PEFT adapter folder + tokenizer
    cfg = ModelConfig(str(tmp_path / "ckpt"), dtype="float32")
    vllm_side = registry.sampler("vllm", cfg)
    torch_side = registry.sampler("torch", cfg)
    prompts = chat_prompts(vllm_side.tokenizer, PROMPT_TEXTS)
    cons = [move_constraint(vllm_side.tokenizer, 0)] * len(prompts)
    out = vllm_side.sample(prompts, SamplingParams(max_tokens=8, seed=3), cons)
    assert all(tuple(c.tokens[c.answer_start :]) in cons[0].choices for c in out)
    # free text: the checkpoint's adapter is applied as the torch engine applies it
    free = vllm_side.sample(prompts, SamplingParams(max_tokens=6, seed=3))
    scored = torch_side.score(prompts, [list(c.tokens) for c in free])
    for completion, ref in zip(free, scored, strict=True):
        assert max(abs(a - b) for a, b in zip(completion.logprobs, ref, strict=True)) < TOLERANCE
    assert vllm_side.engine is pair[1].engine  # type: ignore[attr-defined]  # one per process
    with pytest.raises(Exception, match="does not train"):
        registry.learner("vllm", cfg)


def test_spiral_train_with_sampler_engine_vllm(model_dir: Path, tmp_path: Path) -> None:
    from spiral.report.sinks import read_jsonl
    from spiral.train.config import parse_config
    from spiral.train.loop import train
    from spiral.train.setup import build_setup, make_learner_factory

    cfg = parse_config(
        [
            f"model_name={model_dir}",
            "env_ids=KuhnPokerSingle-v0",
            "answer_format=constrained",
            "batch_size=8",
            "max_steps=2",
            "max_tokens=6",
            "lora_rank=8",
            "learning_rate=5e-2",
            "dtype=float32",
            "eval_every=0",
            "save_every=0",
            "template=chat",
            "sampler_engine=vllm",
            "vllm_kv_cache_gb=0.25",
            f"log_path={tmp_path / 'run'}",
        ]
    )
    train(cfg, build_setup(cfg), make_learner_factory(cfg), log=lambda _: None)
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1]
    assert all(r["perf/vllm_sample_s"] > 0 for r in rows)
    # fresh vLLM samples are on-policy for the torch learner: importance ratio 1
    assert all(abs(r["train/ratio_mean"] - 1.0) < 1e-3 for r in rows if "train/ratio_mean" in r)
    assert any("train/ratio_mean" in r for r in rows)


def test_pool_members_are_adapters_sampled_beside_the_policy(  # type: ignore[no-untyped-def]
    pair, tmp_path: Path
) -> None:
    learner, wrapped = pair
    wrapped.frozen.freeze("past", tmp_path / "past")  # the current weights, frozen
    learner.temperature = 1.0
    datums = _datums(wrapped, seed=4)
    learner.forward_backward(datums, is_loss)
    learner.optim_step(5e-2)  # the policy moves on; the member stays
    prompts = chat_prompts(wrapped.tokenizer, PROMPT_TEXTS)
    params = SamplingParams(max_tokens=6, seed=5)
    mixed = wrapped.sampler().sample(prompts, params, adapters=["past", None, "past", None])
    member = wrapped.frozen.sampler("past").sample(prompts, params)
    policy = wrapped.sampler().sample(prompts, params)
    for i, row in enumerate(mixed):  # one batch, each row with its own adapter
        expected = member[i] if i % 2 == 0 else policy[i]
        assert row.tokens == expected.tokens
        assert (
            max(abs(a - b) for a, b in zip(row.logprobs, expected.logprobs, strict=True))
            < TOLERANCE
        )
    assert any(a.logprobs != b.logprobs for a, b in zip(member, policy, strict=True))
    wrapped.frozen.drop("past")
    assert not wrapped.engine.has_adapter(wrapped.prefix + "past")


def test_spiral_serve_on_vllm_answers_the_openai_client_with_legal_moves_only(
    model_dir: Path, pair
) -> None:  # type: ignore[no-untyped-def]
    from evaluation_cli import running_server
    from openai import OpenAI

    from spiral import games
    from spiral.agents.model_agent import load_sampler, resolve_source
    from spiral.serving.server import create_app

    sampler = load_sampler(resolve_source(str(model_dir)), dtype="float32", engine="vllm")
    assert sampler.engine is pair[1].engine  # the process's one engine over this base model
    with running_server(create_app(sampler, "tiny-vllm")) as url:
        client = OpenAI(base_url=url, api_key="unused", max_retries=0)
        state = games.make("TicTacToe-v0", seed=0)
        moves = 0
        while not state.is_terminal():
            seat = state.current_player()
            legal = state.legal_actions()
            reply = client.chat.completions.create(
                model="tiny-vllm",
                messages=[{"role": "user", "content": state.observation(seat)}],
                max_tokens=8,
                seed=moves,
                extra_body={"guided_choice": legal},
            )
            answer = reply.choices[0].message.content
            assert answer in legal, (answer, legal)
            state.apply_action(answer)
            moves += 1
    assert moves >= 5


def test_full_fine_tuning_syncs_every_weight_into_a_private_engine(model_dir: Path) -> None:
    from spiral.engines.vllm.learner import sampled_by_vllm

    cfg = ModelConfig(str(model_dir), lora_rank=0, dtype="float32")
    learner = TorchLearner(cfg, micro_batch_tokens=200)
    wrapped = sampled_by_vllm(learner, cfg, kv_cache_gb=0.25, max_model_len=4096)
    assert wrapped.engine.lora_slot == 0  # type: ignore[attr-defined]
    datums = _datums(wrapped, seed=0)  # type: ignore[arg-type]
    assert max_gap(learner, datums) < TOLERANCE
    learner.forward_backward(datums, is_loss)
    learner.optim_step(1e-2)
    assert max_gap(learner, datums) > 10 * TOLERANCE  # every weight moved
    fresh = _datums(wrapped, seed=1)  # type: ignore[arg-type]
    assert max_gap(learner, fresh) < TOLERANCE  # the engine holds the new weights
