"""Exact move distributions from a tiny hand-written language model with known numbers."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spiral.analysis.move_distribution import ScoreFn, move_distribution, sampled_frequencies

PROMPT = [1]
OPEN, CHECK, BET, CLOSE, OTHER = 10, 20, 21, 30, 99
# Next-token probabilities of a toy model, keyed by the full context (prompt + prefix).
TOY_MODEL: dict[tuple[int, ...], dict[int, float]] = {
    (1,): {OPEN: 0.9, OTHER: 0.1},
    (1, OPEN): {CHECK: 0.6, BET: 0.3, OTHER: 0.1},
    (1, OPEN, CHECK): {CLOSE: 0.5, OTHER: 0.5},
    (1, OPEN, BET): {CLOSE: 1.0},
}
CHOICES = [("[check]", [OPEN, CHECK, CLOSE]), ("[bet]", [OPEN, BET, CLOSE])]


class ToyScorer:
    """A Sampler.score over TOY_MODEL that counts its batched calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, prompts: list[list[int]], conts: list[list[int]]) -> list[list[float]]:
        self.calls += 1
        out = []
        for prompt, cont in zip(prompts, conts, strict=True):
            ctx = tuple(prompt)
            row = []
            for tok in cont:
                row.append(math.log(TOY_MODEL[ctx][tok]))
                ctx += (tok,)
            out.append(row)
        return out


def test_sequence_normalisation_by_hand() -> None:
    # P([check]) = 0.9 * 0.6 * 0.5 = 0.27 and P([bet]) = 0.9 * 0.3 * 1.0 = 0.27: a tie.
    scorer = ToyScorer()
    dist = move_distribution(scorer, PROMPT, CHOICES)
    assert dist == pytest.approx({"[check]": 0.5, "[bet]": 0.5}, abs=1e-12)
    assert scorer.calls == 1  # every choice scored in one batched call


def test_trie_normalisation_by_hand() -> None:
    # A trie sampler forces "[" and "]" and picks check:bet as 0.6:0.3 -> 2/3, 1/3.
    dist = move_distribution(ToyScorer(), PROMPT, CHOICES, normalisation="trie")
    assert dist == pytest.approx({"[check]": 2 / 3, "[bet]": 1 / 3}, abs=1e-12)


def test_trie_uses_one_number_per_shared_prefix() -> None:
    """Rows that score the shared tokens slightly differently (low-precision kernels round
    by a row's place in the batch) still give a distribution that sums to 1: each shared
    conditional is the rows' mean, used for every row. Seen on the embedded model in
    bf16, where the rows' own numbers summed to 0.968 over four TicTacToe moves."""
    a, b, c = math.log(0.5), math.log(0.3), math.log(0.2)
    rows = [[-0.10, a, -0.01], [-0.13, b, -0.02], [-0.07, c, -0.03]]  # "[" scored 3 ways
    choices = [("[0]", [OPEN, 0, CLOSE]), ("[1]", [OPEN, 1, CLOSE]), ("[2]", [OPEN, 2, CLOSE])]
    dist = move_distribution(lambda p, q: rows, PROMPT, choices, normalisation="trie")
    assert math.fsum(dist.values()) == pytest.approx(1.0, abs=1e-12)
    assert dist == pytest.approx({"[0]": 0.5, "[1]": 0.3, "[2]": 0.2}, abs=1e-12)


@pytest.mark.parametrize("normalisation", ["sequence", "trie"])
def test_single_token_answers_agree_in_both_normalisations(normalisation: str) -> None:
    table = {5: 0.2, 6: 0.1, 7: 0.1}

    def score(prompts: list[list[int]], conts: list[list[int]]) -> list[list[float]]:
        return [[math.log(table[c[0]])] for c in conts]

    dist = move_distribution(score, [0], [("a", [5]), ("b", [6]), ("c", [7])], normalisation)  # type: ignore[arg-type]
    assert dist == pytest.approx({"a": 0.5, "b": 0.25, "c": 0.25}, abs=1e-12)


def test_very_negative_logprobs_are_stable() -> None:
    # exp(-1000) underflows; log-sum-exp must still give 1 / (1 + e^-1) = 0.731059.
    def score(prompts: list[list[int]], conts: list[list[int]]) -> list[list[float]]:
        return [[-600.0, -400.0], [-1001.0]][: len(conts)]

    dist = move_distribution(score, [0], [("x", [1, 2]), ("y", [3])])
    assert dist["x"] == pytest.approx(1 / (1 + math.exp(-1)), abs=1e-12)
    assert dist["y"] == pytest.approx(math.exp(-1) / (1 + math.exp(-1)), abs=1e-12)


def test_rejects_prefix_answers() -> None:
    with pytest.raises(ValueError, match="prefix-free"):
        move_distribution(ToyScorer(), PROMPT, [("[", [OPEN]), ("[check]", CHOICES[0][1])])


def test_rejects_duplicate_names_and_empty_answers() -> None:
    with pytest.raises(ValueError, match="unique"):
        move_distribution(ToyScorer(), PROMPT, [CHOICES[0], CHOICES[0]])
    with pytest.raises(ValueError, match="at least one token"):
        move_distribution(ToyScorer(), PROMPT, [("x", [])])
    with pytest.raises(ValueError, match="at least one legal move"):
        move_distribution(ToyScorer(), PROMPT, [])


def test_rejects_logits_and_wrong_shapes() -> None:
    def logits(prompts: list[list[int]], conts: list[list[int]]) -> list[list[float]]:
        return [[2.5] * len(c) for c in conts]

    def short(prompts: list[list[int]], conts: list[list[int]]) -> list[list[float]]:
        return [[-1.0] for _ in conts]

    with pytest.raises(ValueError, match="invalid log-probs"):
        move_distribution(logits, PROMPT, CHOICES)
    with pytest.raises(ValueError, match="log-probs for the 3 tokens"):
        move_distribution(short, PROMPT, CHOICES)
    with pytest.raises(ValueError, match="unknown normalisation"):
        move_distribution(ToyScorer(), PROMPT, CHOICES, normalisation="softmax")  # type: ignore[arg-type]


def _consistent_scorer(salt: int) -> ScoreFn:
    """Log-probs that depend only on (context, token), as a real model's do."""

    def score(prompts: list[list[int]], conts: list[list[int]]) -> list[list[float]]:
        out = []
        for prompt, cont in zip(prompts, conts, strict=True):
            ctx: tuple[int, ...] = tuple(prompt)
            row = []
            for tok in cont:
                row.append(-((hash((salt, ctx, tok)) % 5000) / 100.0))
                ctx += (tok,)
            out.append(row)
        return out

    return score


def _prefix_free(answers: Sequence[tuple[int, ...]]) -> bool:
    return not any(a != b and b[: len(a)] == a for a in answers for b in answers)


@given(
    st.lists(
        st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=4).map(tuple),
        min_size=1,
        max_size=8,
        unique=True,
    ).filter(_prefix_free),
    st.integers(),
    st.sampled_from(["sequence", "trie"]),
)
def test_distribution_sums_to_one(
    answers: list[tuple[int, ...]], salt: int, normalisation: str
) -> None:
    choices = [(f"m{i}", list(a)) for i, a in enumerate(answers)]
    dist = move_distribution(_consistent_scorer(salt), [7, 7], choices, normalisation)  # type: ignore[arg-type]
    assert set(dist) == {name for name, _ in choices}
    assert all(0.0 <= p <= 1.0 for p in dist.values())
    assert math.fsum(dist.values()) == pytest.approx(1.0, abs=1e-9)


def test_sampled_frequencies_counts() -> None:
    draws = ["[bet]", "[check]", "[bet]", "[bet]"]
    freqs = sampled_frequencies(lambda n: draws[:n], 4)
    assert freqs == {"[bet]": 0.75, "[check]": 0.25}
    assert list(freqs) == ["[bet]", "[check]"]


def test_sampled_frequencies_rejects_wrong_count() -> None:
    with pytest.raises(ValueError, match="exactly n"):
        sampled_frequencies(lambda n: ["[bet]"], 3)
    with pytest.raises(ValueError, match="positive"):
        sampled_frequencies(lambda n: [], 0)
