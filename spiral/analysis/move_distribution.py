"""The exact distribution of a language model over the legal moves at one state.

A sampled win rate carries sampling noise; exploitability and policy tables need the
probabilities themselves. Here they come from one `Sampler.score` call: the log-prob of
each legal move's answer tokens given the prompt (temperature 1).

Two normalisations, chosen by name (a small registry, not a flag):

- "sequence" (default): P(move) proportional to exp(sum of its token log-probs),
  renormalised over the legal moves. This is the model's distribution *conditional on its
  continuation beginning with one of the legal answers* (disjoint events, since answers
  must be prefix-free). With no reasoning before the answer, it is exactly what a sampler
  gets by rejecting draws until the answer is a legal move. For free-text formats
  (reasoning, then \\boxed{}) it is the distribution conditional on answering with a
  legal move directly, skipping the reasoning.
- "trie": exactly the distribution of a sampler that constrains token by token through
  a trie of the legal answers (`AnswerConstraint`): at each shared prefix the allowed
  next tokens are renormalised locally, and a forced token (one child) gets probability
  1. Every conditional it needs is one of the scored token log-probs, so it is exact too.

The two agree when no answer has tokens after the point where it leaves the others (for
example, all answers one token long). Otherwise they differ: "sequence" also weighs the
tokens after the branch point (e.g. the closing "]" of "[check]" vs "[bet]"), which a
trie sampler forces with probability 1. Ask the engine which one it samples from.
Prompts must already end with any forced answer marker.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Literal

ScoreFn = Callable[[list[list[int]], list[list[int]]], list[list[float]]]
Normalisation = Literal["sequence", "trie"]


def _log_softmax(logits: Sequence[float]) -> list[float]:
    """Stable log-softmax: subtract the max before exponentiating."""
    top = max(logits)
    if top == -math.inf:
        raise ValueError("every choice has log-probability -inf; the model gives them no mass")
    log_total = top + math.log(math.fsum(math.exp(x - top) for x in logits))
    return [x - log_total for x in logits]


def _sequence_logprobs(
    token_ids: Sequence[tuple[int, ...]], token_logprobs: Sequence[list[float]]
) -> list[float]:
    return _log_softmax([math.fsum(lps) for lps in token_logprobs])


def trie_token_logprobs(
    token_ids: Sequence[tuple[int, ...]], token_logprobs: Sequence[list[float]]
) -> list[list[float]]:
    """Per choice, each token's log-prob under the trie normalisation: the scored
    log p(token | prompt + prefix) renormalised over the tokens the choices allow after
    that prefix (0 where only one is allowed), what a constrained sampler records."""
    # log p(token | prompt + prefix), keyed by (prefix, token). Every choice through the
    # same prefix was scored on the same context, so each of them supplies the number;
    # in low precision they differ in the last bits (a row's place in the batch changes
    # the kernels' rounding: ~0.03 nats for the embedded model in bf16), so the rows'
    # mean is the one conditional used everywhere, and the moves' probabilities sum to 1.
    found: dict[tuple[tuple[int, ...], int], list[float]] = {}
    for ids, lps in zip(token_ids, token_logprobs, strict=True):
        for t, (tok, lp) in enumerate(zip(ids, lps, strict=True)):
            found.setdefault((ids[:t], tok), []).append(lp)
    step = {edge: math.fsum(lps) / len(lps) for edge, lps in found.items()}
    children: dict[tuple[int, ...], list[float]] = {}
    for (prefix, _tok), lp in step.items():
        children.setdefault(prefix, []).append(lp)
    out = []
    for ids in token_ids:
        row = []
        for t, tok in enumerate(ids):
            siblings = children[ids[:t]]
            top = max(siblings)
            log_total = top + math.log(math.fsum(math.exp(s - top) for s in siblings))
            row.append(0.0 if len(siblings) == 1 else step[(ids[:t], tok)] - log_total)
        out.append(row)
    return out


def _trie_logprobs(
    token_ids: Sequence[tuple[int, ...]], token_logprobs: Sequence[list[float]]
) -> list[float]:
    return [math.fsum(row) for row in trie_token_logprobs(token_ids, token_logprobs)]


_NORMALISERS: dict[
    str, Callable[[Sequence[tuple[int, ...]], Sequence[list[float]]], list[float]]
] = {
    "sequence": _sequence_logprobs,
    "trie": _trie_logprobs,
}


def _check_choices(choices: Sequence[tuple[str, list[int]]]) -> None:
    if not choices:
        raise ValueError("move_distribution needs at least one legal move choice")
    names = [name for name, _ in choices]
    dupes = [name for name, count in Counter(names).items() if count > 1]
    if dupes:
        raise ValueError(f"move names must be unique; repeated: {dupes}")
    ids = [tuple(tokens) for _, tokens in choices]
    if any(len(t) == 0 for t in ids):
        raise ValueError("every choice needs at least one token; tokenise the move text")
    if len(set(ids)) != len(ids):
        raise ValueError("two moves have the same token ids; they cannot be told apart")
    # Both normalisations need disjoint answers: if "[1" were a choice beside "[12]", the
    # events "starts with [1" and "starts with [12]" would overlap.
    for a in ids:
        for b in ids:
            if a != b and b[: len(a)] == a:
                raise ValueError(
                    f"answers must be prefix-free, but {a} is a prefix of {b}; "
                    "add a closing token (such as ']') to every answer"
                )


def move_distribution(
    score_fn: ScoreFn,
    prompt_ids: list[int],
    choices: list[tuple[str, list[int]]],
    normalisation: Normalisation = "sequence",
) -> dict[str, float]:
    """Exact P(move | prompt) over `choices` = [(move, answer token ids), ...].

    `score_fn` is a `Sampler.score`: given prompts and continuations it returns each
    continuation's per-token log-probs. All choices are scored in one batched call.
    """
    if normalisation not in _NORMALISERS:
        raise ValueError(
            f"unknown normalisation {normalisation!r}; use one of {sorted(_NORMALISERS)}"
        )
    _check_choices(choices)
    token_ids = [tuple(tokens) for _, tokens in choices]
    scored = score_fn([list(prompt_ids) for _ in choices], [list(t) for t in token_ids])
    if len(scored) != len(choices):
        raise ValueError(f"score_fn returned {len(scored)} rows for {len(choices)} choices")
    for (name, tokens), lps in zip(choices, scored, strict=True):
        if len(lps) != len(tokens):
            raise ValueError(
                f"score_fn returned {len(lps)} log-probs for the {len(tokens)} tokens of {name!r}"
            )
        if any(math.isnan(lp) or lp > 1e-3 for lp in lps):
            # Positive values mean logits or scores were returned instead of log-probs.
            raise ValueError(f"score_fn returned invalid log-probs for {name!r}: {lps}")
    logps = _NORMALISERS[normalisation](token_ids, [list(map(float, row)) for row in scored])
    return {name: math.exp(lp) for (name, _), lp in zip(choices, logps, strict=True)}


def sampled_frequencies(sample_fn: Callable[[int], list[str]], n: int) -> dict[str, float]:
    """Empirical move frequencies from `sample_fn(n)`, which returns n sampled moves.

    The noisy counterpart of `move_distribution`, for agents that can only be sampled
    (API models, reasoning formats). Sorted by move for stable logs.
    """
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    moves = sample_fn(n)
    if len(moves) != n:
        raise ValueError(f"sample_fn({n}) returned {len(moves)} moves; it must return exactly n")
    counts = Counter(moves)
    return {move: counts[move] / n for move in sorted(counts)}
