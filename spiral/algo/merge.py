"""Merge identical training rows into one weighted row: big self-play batches for free.

Self-play asks the same questions over and over: single-hand Kuhn poker has 12 distinct
prompts and two answers to each, so a 512-hand batch of ~1,100 rows holds at most 24
distinct (prompt, answer) pairs, and merges into ~33 weighted rows once the advantages'
signs split some of them (docs/results.md, "Throughput of a step"). Training each copy
separately repeats the same forward and backward pass; a merged row does it once.

`merge_identical(datums)` groups rows that are equal in everything the learner reads
(input and target ids, sampler log-probs, mask, constraint, game, seat) and in the SIGN
of their advantage, and returns one row per group with

    weight     = sum of the group's weights (how many sampled rows it stands for)
    advantages = the weight-averaged advantages of the group

The learner weighs each row's per-token loss by `weight` (it multiplies the mask), so a
merged row contributes weight * mean(A) * f(ratio) = sum(A_i) * f(ratio), exactly the sum
of its members' contributions, and it normalises by the summed weights, as before.

Why exact, and when:
- **importance_sampling** is linear in the advantage for a given ratio, so any grouping is
  exact, on-policy or off-policy, for any number of optimizer steps on the batch.
- **ppo** computes min(r * A, clip(r) * A) = A * min(r, clip(r)) for A >= 0 and
  A * max(r, clip(r)) for A < 0: linear in A within one sign. Rows are merged only with
  rows of the same sign, so PPO is exact too, at any ratio: at the first step on
  on-policy data (r = 1) and at later substeps or on stale data (r != 1) alike.
- Members must share their sampler log-probs bit for bit (they are part of the key): the
  sampler computes one log-prob per decode node, so identical samples from one call
  agree exactly; rows from different calls merge only if their numbers happen to match.
- With `num_substeps` > 1 the batch is split into minibatches after merging, so the
  members of a merged row always land in the same minibatch: the result equals an
  unmerged run whose minibatches keep identical rows together.
- Regularisers and diagnostics are per token and weighted by `weight`, so they count
  each merged row as many times as it was sampled.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from spiral.types import Datum

MergeKey = tuple[object, ...]


def _sign(datum: Datum) -> int:
    """-1 if the row's masked advantages are negative, else +1 (zero counts as +1)."""
    trained = [a for a, m in zip(datum.advantages, datum.mask, strict=True) if m > 0]
    if any(a < 0 for a in trained) and any(a > 0 for a in trained):
        return 0  # mixed signs inside one row: never merged with anything
    return -1 if any(a < 0 for a in trained) else 1


def merge_key(datum: Datum) -> MergeKey:
    """Everything the learner reads from a row except its advantage and weight, plus the
    advantage's sign."""
    return (
        datum.input_ids,
        datum.target_ids,
        datum.sampler_logprobs,
        datum.mask,
        datum.constraint_start,
        datum.constraint,
        datum.game_id,
        datum.seat,
        datum.policy_version,  # rows of two versions stay apart (staleness statistics)
        _sign(datum),
    )


def merge_identical(datums: Sequence[Datum]) -> tuple[list[Datum], dict[str, float]]:
    """One weighted row per group of identical rows (see the module docstring).

    Rows keep the order of their first occurrence. Metrics: `merge/rows_in`,
    `merge/rows_out`, `merge/ratio` (rows in per row out)."""
    groups: dict[MergeKey, list[Datum]] = {}
    for datum in datums:
        key = merge_key(datum) if _sign(datum) != 0 else (id(datum),)
        groups.setdefault(key, []).append(datum)
    merged = [_merge(members) for members in groups.values()]
    rows_in, rows_out = float(len(datums)), float(len(merged))
    metrics = {
        "merge/rows_in": rows_in,
        "merge/rows_out": rows_out,
        "merge/ratio": rows_in / rows_out if rows_out else 1.0,
    }
    return merged, metrics


def _merge(members: list[Datum]) -> Datum:
    if len(members) == 1:
        return members[0]
    total = sum(d.weight for d in members)
    width = len(members[0].advantages)
    mean = tuple(sum(d.advantages[t] * d.weight for d in members) / total for t in range(width))
    return replace(members[0], advantages=mean, weight=total)


def split_minibatches(datums: Sequence[Datum], n: int, seed: int) -> list[list[Datum]]:
    """Shuffle the rows with `seed` and cut them into `n` minibatches of nearly equal row
    counts (tinker-cookbook's `num_substeps`: one optimizer step per minibatch). Fewer
    rows than `n` give one minibatch per row."""
    if n < 1:
        raise ValueError(f"num_substeps must be >= 1, got {n}")
    order = list(datums)
    random.Random(seed).shuffle(order)
    n = max(1, min(n, len(order)))
    size, extra = divmod(len(order), n)
    out, start = [], 0
    for k in range(n):
        end = start + size + (1 if k < extra else 0)
        out.append(order[start:end])
        start = end
    return out
