"""A model's exact move distributions: one batched score call gives what each position
asked alone gives, and the TicTacToe key meets every position once."""

from __future__ import annotations

import pytest

from spiral.agents.llm_policy import LLMPolicy
from spiral.analysis.perfect_info import decisions, game_positions
from spiral.engines.base import SamplingParams
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.loading import load_model_and_tokenizer
from spiral.engines.torch.sampler import TorchSampler
from spiral.evaluation.model_policy import (
    SLICE,
    model_move_distribution,
    model_move_distributions,
    tictactoe_key,
)
from spiral.games import make
from spiral.games.base import State
from spiral.prompts.spec import PromptSpec
from spiral.testing import make_tiny_model


@pytest.fixture(scope="module")
def sampler(tmp_path_factory: pytest.TempPathFactory) -> TorchSampler:
    path = make_tiny_model(tmp_path_factory.mktemp("tiny") / "llama")
    model, tok = load_model_and_tokenizer(ModelConfig(str(path), lora_rank=0))
    return TorchSampler(model, tok)


def _policy(sampler: TorchSampler, answer_format: str) -> LLMPolicy:
    spec = PromptSpec(answer_format=answer_format)  # type: ignore[arg-type]
    return LLMPolicy(sampler, spec, SamplingParams(max_tokens=8))


def _after(*moves: str) -> State:
    state = make("TicTacToe-v0")
    for move in moves:
        state.apply_action(move)
    return state


@pytest.mark.parametrize("answer_format", ["constrained", "bracket"])
def test_batched_distributions_equal_one_position_at_a_time(
    sampler: TorchSampler, answer_format: str
) -> None:
    """Positions with 9, 8, 6 and 4 legal moves (different prompts, different answer
    sets) scored together give each one's own distribution."""
    policy = _policy(sampler, answer_format)
    states = [
        _after(),
        _after("[4]"),
        _after("[4]", "[0]", "[8]"),
        _after("[0]", "[1]", "[2]", "[4]", "[3]"),
    ]
    positions = [(s, s.current_player()) for s in states]
    batched = model_move_distributions(policy, positions, temperature=0.7)
    for (state, seat), dist in zip(positions, batched, strict=True):
        alone = model_move_distribution(policy, state, seat, temperature=0.7)
        assert set(dist) == set(state.legal_actions()) == set(alone)
        assert sum(dist.values()) == pytest.approx(1.0)
        for move, p in dist.items():
            assert p == pytest.approx(alone[move], rel=1e-4, abs=1e-6)
    # not all uniform: the model's scores really differ by move
    assert any(max(d.values()) - min(d.values()) > 1e-3 for d in batched)


def test_the_prompt_key_meets_each_position_once(sampler: TorchSampler) -> None:
    """With the default observation (rules + current board), the board and the prompt of
    the seat to move name 5,478 positions, 4,520 of them decisions: as many as boards."""
    positions = game_positions(make("TicTacToe-v0"), tictactoe_key(_policy(sampler, "constrained")))
    assert len(positions) == 5478
    assert len(decisions(positions)) == 4520


def test_a_constraint_that_does_not_follow_the_legal_moves_is_refused(
    sampler: TorchSampler, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spiral.evaluation import model_policy

    real = model_policy.constraint_for

    def short(state, spec, tokenizer):  # type: ignore[no-untyped-def]
        found = real(state, spec, tokenizer)
        return type(found)(marker=found.marker, choices=found.choices[:-1])

    monkeypatch.setattr(model_policy, "constraint_for", short)
    state = _after()
    with pytest.raises(ValueError, match="offers 8 answers for 9 legal moves"):
        model_move_distribution(_policy(sampler, "constrained"), state, 0)


@pytest.mark.parametrize("answer_format", ["constrained", "bracket"])
def test_a_models_leduc_exploitability_is_its_table_handed_to_openspiel(
    sampler: TorchSampler, answer_format: str
) -> None:
    """The model's distributions at Leduc's 288 distinct situations, one batched call,
    give an exploitability between Nash's 0 and the bound of any policy; the same table
    asked position by position gives the same number."""
    pytest.importorskip("pyspiel")
    from spiral.analysis.leduc import leduc_exploitability
    from spiral.evaluation.model_policy import model_leduc_exploitability

    policy = _policy(sampler, answer_format)
    seen: list[tuple[int, int]] = []
    report = model_leduc_exploitability(policy, progress=lambda *done: seen.append(done))
    assert report["situations"] == 288 and 0.0 < report["exploitability"] < 13.0
    # A progress line a slice, ending with every situation scored.
    assert seen[-1] == (288, 288) and len(seen) == -(-288 // SLICE)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    for seat in (0, 1):  # where a best responder gains, by round, adds up to what it gains
        rounds = [report[f"br_gain_seat{seat}_round{r}"] for r in (1, 2)]
        gained = report[f"br_value_seat{seat}"] - report[f"value_selfplay_seat{seat}"]
        assert min(rounds) >= -1e-12 and sum(rounds) == pytest.approx(gained, abs=1e-9)
    one_by_one = leduc_exploitability(
        lambda positions: [model_move_distribution(policy, s, seat) for s, seat in positions]
    )
    assert one_by_one["exploitability"] == pytest.approx(report["exploitability"], rel=1e-4)
