"""runahead.py's loop on a scripted decoder: which chunks run ahead, the uniforms each row
draws, NaN logits and cancellation. (Its tokens against the tree decode's, on a real
model: tests/engines/test_graphs.py.)"""

from __future__ import annotations

import random
import threading

import pytest
import torch

from spiral.engines.base import SamplingCancelled, SamplingParams
from spiral.engines.torch.draws import NonFiniteLogitsError
from spiral.engines.torch.runahead import run_ahead, runs_ahead
from spiral.types import AnswerConstraint


class _Row:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.stop_reason: str | None = None


class _Scripted:
    """Every step gives each row the same logits; records what it was fed."""

    def __init__(self, logits_V: torch.Tensor) -> None:
        self.logits_V, self.rows, self.fed = logits_V, 0, []

    def select(self, index_B: torch.Tensor) -> None:
        self.rows = int(index_B.shape[0])

    def step(self, ids_B: torch.Tensor) -> torch.Tensor:
        self.fed.append(ids_B.tolist())
        return self.logits_V.expand(self.rows, -1).clone()


def _advance(row: _Row, token: int, params: SamplingParams) -> None:
    if token == 0:
        row.stop_reason = "eos"
    elif len(row.tokens) >= params.max_tokens:
        row.stop_reason = "length"


def test_which_chunks_run_ahead() -> None:
    sampled, greedy = SamplingParams(temperature=1.0), SamplingParams(temperature=0.0)
    move = AnswerConstraint(choices=((5,), (6,)))
    assert runs_ahead([None, None], sampled)
    assert not runs_ahead([None, None], greedy)  # identical greedy rows never branch
    assert not runs_ahead([None, move], sampled)  # a few legal moves: the tree's case


def test_each_row_draws_its_own_uniforms_and_stops_where_its_rule_says() -> None:
    """Probabilities [0.5, 0.25, 0.25] over tokens 0 (eos), 1, 2: a row's token is read
    from its own uniforms by inverse CDF (u < 0.5 -> 0, u < 0.75 -> 1, else 2)."""
    logits_V = torch.tensor([0.5, 0.25, 0.25]).log()
    rows = [_Row(1), _Row(2), _Row(3)]
    expected = []
    for seed in (1, 2, 3):
        rng, tokens = random.Random(seed), []
        while len(tokens) < 6:
            u = rng.random()
            tokens.append(0 if u < 0.5 else 1 if u < 0.75 else 2)
            if tokens[-1] == 0:
                break
        expected.append(tokens)
    decoder = _Scripted(logits_V)
    params = SamplingParams(max_tokens=6, temperature=1.0)
    run_ahead(decoder, logits_V.unsqueeze(0), [rows], params, _advance, every=4)
    assert [r.tokens for r in rows] == expected
    for row, tokens in zip(rows, expected, strict=True):
        assert row.stop_reason == ("eos" if tokens[-1] == 0 else "length")
        assert row.logprobs == pytest.approx([float(logits_V[t]) for t in tokens])
    # whole blocks of 4 steps until every row stopped, never past max_tokens (6): one
    # feed fewer than the steps (the first token comes from the prefill's logits)
    longest = max(map(len, expected))
    assert len(decoder.fed) == min(6, -(-longest // 4) * 4) - 1


def test_nan_logits_and_cancellation_stop_it() -> None:
    params = SamplingParams(max_tokens=6, temperature=1.0)
    nan_V = torch.full((3,), float("nan"))
    with pytest.raises(NonFiniteLogitsError, match="learning_rate"):
        run_ahead(_Scripted(nan_V), nan_V.unsqueeze(0), [[_Row(0)]], params, _advance)
    cancel = threading.Event()
    cancel.set()
    logits_V = torch.zeros(3)
    stopped = SamplingParams(max_tokens=6, temperature=1.0, cancel=cancel)
    with pytest.raises(SamplingCancelled):
        run_ahead(_Scripted(logits_V), logits_V.unsqueeze(0), [[_Row(0)]], stopped, _advance)
