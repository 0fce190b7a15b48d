"""The KL magnet's distributions at constrained answers, kept while its weights stay.

A KL towards a frozen magnet (the snapshot the loop refreshes every `kl_magnet_interval`
steps, or the base model under the LoRA adapter) needs the magnet's next-token
distribution at every trained position: a forward of the magnet over every row, as long
as the learner's own forward. Under constrained answers the same rows come back step after
step (single-hand Kuhn poker has 12 information states, ~33 merged rows a step), and the
magnet does not change between refreshes, so its distributions there are kept: per row
(its token ids and the temperature), the log-probabilities of the allowed tokens at each
trained position, until the magnet's weights change (other tensors, or the same tensors
written to).

A kept value must be what a fresh computation gives, or a resumed run (which starts with
nothing kept) would train on other numbers than an uninterrupted one. So a row's values
never come from the batch it arrived in: each prompt ("stem", everything before the row's
first trained token) runs alone (batch of one), and each row's trained tail alone on a copy
of that prompt's KV cache (`tails_alone`). The values then depend on the row and the
magnet's weights only, whatever else was in the batch and whatever was kept. Rows with an
unconstrained trained position (free text) keep the batch path: their positions are many
and rarely repeat.
"""

from __future__ import annotations

import copy
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import torch

from spiral.engines.torch.batching import Locate, Plan, first_needed
from spiral.engines.torch.head import Magnet
from spiral.engines.torch.loading import cache_kwarg
from spiral.types import Datum

Allowed = tuple[int, ...]
_Kept = dict[int, tuple[Allowed, torch.Tensor]]  # position -> (allowed ids, their log-probs)


class MagnetMemo:
    """Kept magnet log-probabilities per row, for one set of magnet weights at a time."""

    def __init__(self, max_rows: int = 4096) -> None:
        self.max_rows = max_rows
        self._weights: list[torch.Tensor] = []  # held, so their memory is never reused
        self._versions: list[int] = []
        self._rows: OrderedDict[bytes, _Kept] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def bind(self, weights: Sequence[torch.Tensor]) -> None:
        """Forget what was kept unless `weights` are the same tensors, unwritten since."""
        same = len(weights) == len(self._weights) and all(
            a is b and a._version == v
            for a, b, v in zip(weights, self._weights, self._versions, strict=True)
        )
        if not same:
            self._rows.clear()
            self._weights = list(weights)
            self._versions = [w._version for w in weights]

    @staticmethod
    def key(ids: Sequence[int], temperature: float) -> bytes:
        digest = hashlib.blake2b(digest_size=16)
        digest.update(repr(float(temperature)).encode())
        digest.update(torch.tensor(list(ids), dtype=torch.int64).numpy().tobytes())
        return digest.digest()

    def get(self, key: bytes, want: dict[int, Allowed]) -> dict[int, torch.Tensor] | None:
        kept = self._rows.get(key)
        if kept is None or any(kept.get(t, ((), None))[0] != a for t, a in want.items()):
            self.misses += 1
            return None
        self._rows.move_to_end(key)
        self.hits += 1
        return {t: kept[t][1] for t in want}

    def put(self, key: bytes, values: _Kept) -> None:
        self._rows[key] = {**self._rows.get(key, {}), **values}
        self._rows.move_to_end(key)
        while len(self._rows) > self.max_rows:
            self._rows.popitem(last=False)


def tails_alone(model: Any, rows: Sequence[Sequence[int]], ends: Sequence[int]) -> list[Any]:
    """Final hidden states `[len(row) - end, H]` of each row's tail `row[end:]`: each
    distinct stem `row[:end]` run alone, each tail alone on a copy of its stem's KV."""
    from transformers import DynamicCache

    device = model.device
    stems: dict[tuple[int, ...], Any] = {}
    out = []
    for row, end in zip(rows, ends, strict=True):
        stem = tuple(row[:end])
        if stem and stem not in stems:
            cache = DynamicCache(config=model.config)
            ids = torch.tensor([list(stem)], device=device)
            model(input_ids=ids, use_cache=True, logits_to_keep=1, **cache_kwarg(model, cache))
            stems[stem] = cache
        cache = copy.deepcopy(stems[stem]) if stem else DynamicCache(config=model.config)
        tail = torch.tensor([list(row[end:])], device=device)
        positions = torch.arange(end, len(row), device=device).unsqueeze(0)
        result = model(
            input_ids=tail,
            position_ids=positions,
            use_cache=True,
            output_hidden_states=True,
            logits_to_keep=1,
            **cache_kwarg(model, cache),
        )
        out.append(result.hidden_states[-1][0])
    return out


def memo_magnet(
    batch: Sequence[Datum],
    plan: Plan,
    memo: MagnetMemo | None,
    temperature: float,
    vocab: int,
    batch_hidden: Callable[[list[Datum]], tuple[Any, Locate]],
    alone_hidden: Callable[[list[Datum]], list[Any]],
    log_dists: Callable[[Any, list[Allowed | None]], torch.Tensor],
) -> Magnet:
    """The magnet's log-distributions at `plan`'s positions: rows whose trained positions
    are all constrained from `memo` (computed alone and kept where missing), the others
    by `batch_hidden` over them as one batch (every row, without a `memo`)."""
    planned: dict[int, list[int]] = {}
    for k, b in enumerate(plan.datums):
        planned.setdefault(b, []).append(k)
    kept: dict[int, torch.Tensor] = {}  # plan index -> log-probs of its allowed ids
    missing: list[int] = []
    batched = [
        b for b, ks in planned.items() if memo is None or any(plan.allowed[k] is None for k in ks)
    ]
    for b, ks in planned.items():
        if memo is None or b in batched:
            continue
        got = memo.get(memo.key(batch[b].input_ids, temperature), _wanted(plan, ks))
        if got is None:
            missing.append(b)
        else:
            kept.update({k: got[plan.positions[k]] for k in ks})
    if missing and memo is not None:
        hidden = alone_hidden([batch[b] for b in missing])
        for b, tail_H in zip(missing, hidden, strict=True):
            ks = planned[b]
            end = first_needed(batch[b])
            rows_NH = tail_H[[plan.positions[k] - end for k in ks]]
            dists = log_dists(rows_NH, [plan.allowed[k] for k in ks])
            values: _Kept = {}
            for j, k in enumerate(ks):
                allowed = plan.allowed[k] or ()
                values[plan.positions[k]] = (allowed, dists[j, list(allowed)].clone())
                kept[k] = values[plan.positions[k]][1]
            memo.put(memo.key(batch[b].input_ids, temperature), values)
    return _assembled(batch, plan, planned, batched, kept, vocab, batch_hidden, log_dists)


def _wanted(plan: Plan, ks: list[int]) -> dict[int, Allowed]:
    return {plan.positions[k]: plan.allowed[k] or () for k in ks}


def _assembled(
    batch: Sequence[Datum],
    plan: Plan,
    planned: dict[int, list[int]],
    batched: list[int],
    kept: dict[int, torch.Tensor],
    vocab: int,
    batch_hidden: Callable[[list[Datum]], tuple[Any, Locate]],
    log_dists: Callable[[Any, list[Allowed | None]], torch.Tensor],
) -> Magnet:
    """One function over slices of the plan's positions, from the kept values and the
    batch path's hidden states."""
    where: dict[int, int] = {}  # plan index -> row of hidden_NH (batch path)
    hidden_NH = None
    if batched:
        hidden_BSH, locate = batch_hidden([batch[b] for b in batched])
        spots: list[tuple[int, int]] = []
        for i, b in enumerate(batched):
            for k in planned[b]:
                where[k] = len(spots)
                spots.append(locate(i, plan.positions[k]))
        hidden_NH = hidden_BSH[[r for r, _ in spots], [c for _, c in spots]]

    def magnet(sl: slice) -> torch.Tensor:
        ks = list(range(len(plan.datums)))[sl]
        device = next(iter(kept.values())).device if kept else hidden_NH.device  # type: ignore[union-attr]
        out = torch.full((len(ks), vocab), float("-inf"), device=device)
        from_batch = [j for j, k in enumerate(ks) if k in where]
        if from_batch:
            rows = hidden_NH[[where[ks[j]] for j in from_batch]]  # type: ignore[index]
            out[from_batch] = log_dists(rows, [plan.allowed[ks[j]] for j in from_batch])
        for j, k in enumerate(ks):
            if k in kept:
                out[j, list(plan.allowed[k] or ())] = kept[k]
        return out

    return magnet
