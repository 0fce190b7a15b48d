"""Shared-prefix prefill, used by the sampler (then decode) and the learner (then loss).

`prefill(model, seqs, max_prefix, pad_id)` runs the rows' longest common token prefix
(at most `max_prefix` tokens) ONCE with batch 1, repeats its KV cache over the rows, and
runs the differing suffixes as one left-padded batch (layout `[prefix][pads][suffix]`,
explicit attention mask and position ids, so pads are invisible and each row sees
positions 0..n-1 exactly as an unpadded forward). Nothing here disables autograd: under
`torch.inference_mode` it is the sampler's prefill; with gradients on, the gradient of
every row flows back through the one shared prefix computation.

Rows may compute with different LoRA adapters of one PEFT model (`adapters=`, population
play: the trained policy and frozen pool members in one batch, PEFT's mixed-adapter
forward). A prefix's keys and values depend on the adapter, so the prefix then runs once
per distinct adapter (a batch of that many rows) and each row takes its adapter's copy.

`prefill_grouped` is the learner's tree and `score`'s: the common prefix once, each
distinct prompt (stem) once, then every row's tail. Short tails (up to `PACKED_TAILS_MAX`
tokens a prompt, what constrained answers give) follow their prompt in one sequence
under a tree-shaped attention mask, each tail seeing the prompt and itself, instead of a
row each over a copy of the prompt's cache (`GroupedPrefill.locate` finds each row's
positions). The gradient through the shared cache equals the per-row one (tested).

`packed_hidden` concatenates rows run whole into one sequence without padding. Exact,
but off in the learner: under sdpa's block mask attention covers the whole packed
sequence, 0.56-0.65x the padded batch on a CPU (`benchmarks/pack_ab.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from spiral.engines.torch.kv_cache import PrefixCache
from spiral.engines.torch.loading import cache_kwarg


def common_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for other in seqs[1:]:
        k = 0
        while k < n and other[k] == first[k]:
            k += 1
        n = k
    return n


@dataclass
class Prefill:
    """A chunk after prefill: cache, 2-D attention mask, next positions, last outputs."""

    cache: Any
    mask_BK: torch.Tensor
    next_pos_B: torch.Tensor
    out: Any  # the model output of the suffix forward
    suffix_len: int
    prefix_len: int
    computed_tokens: int


def prefill(
    model: Any,
    seqs: Sequence[Sequence[int]],
    max_prefix: int,
    pad_id: int,
    adapters: Sequence[str] | None = None,
    **kwargs: Any,
) -> Prefill:
    """Run `seqs` into a fresh KV cache, sharing their common prefix (<= max_prefix).
    `adapters`: each row's LoRA adapter (PEFT names), when rows differ in it."""
    from transformers import DynamicCache

    device = model.device
    rows = len(seqs)
    cache = DynamicCache(config=model.config)
    prefix = min(common_prefix_len(seqs), max_prefix) if rows > 1 else 0
    computed = 0
    if adapters is not None:
        if len(adapters) != rows:
            raise ValueError(f"{len(adapters)} adapter names for {rows} rows")
        kwargs = {**kwargs, "adapter_names": list(adapters)}
    if prefix > 0:
        distinct: list[str] = sorted(set(adapters or ()))
        copies = max(1, len(distinct))
        ids_AP = torch.tensor([list(seqs[0][:prefix])] * copies, device=device)
        names = {"adapter_names": distinct} if distinct else {}
        model(
            input_ids=ids_AP,
            use_cache=True,
            logits_to_keep=1,
            **cache_kwarg(model, cache),
            **names,
        )
        if adapters is None:
            cache.batch_repeat_interleave(rows)
        else:
            copy_R = torch.tensor([distinct.index(a) for a in adapters], device=device)
            cache.batch_select_indices(copy_R)
        computed += prefix * copies
    lens = [len(s) - prefix for s in seqs]
    width = max(lens)
    ids_BS = torch.full((rows, width), pad_id, dtype=torch.long)
    real_BS = torch.zeros((rows, width), dtype=torch.long)
    for i, (seq, n) in enumerate(zip(seqs, lens, strict=True)):
        ids_BS[i, width - n :] = torch.tensor(list(seq[prefix:]), dtype=torch.long)
        real_BS[i, width - n :] = 1
    pos_BS = (prefix + torch.cumsum(real_BS, dim=1) - 1).clamp(min=0)
    mask_BK = torch.cat([torch.ones((rows, prefix), dtype=torch.long), real_BS], dim=1)
    out = _extend(model, cache, ids_BS, mask_BK, pos_BS, **kwargs)
    computed += sum(lens)
    next_pos_B = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    return Prefill(cache, mask_BK.to(device), next_pos_B.to(device), out, width, prefix, computed)


def supports_prefix_cache(model: Any) -> bool:
    """Whether cached KV can be reused: every layer a plain full-attention cache layer."""
    from transformers import DynamicCache

    layers = DynamicCache(config=model.config).layers
    return bool(layers) and all(type(layer).__name__ == "DynamicLayer" for layer in layers)


def prefill_cached(
    model: Any,
    seqs: Sequence[Sequence[int]],
    adapters: Sequence[str],
    pad_id: int,
    store: PrefixCache,
    share_prefix: bool = True,
    mixed: bool = False,
    **kwargs: Any,
) -> Prefill:
    """`prefill` that starts every row from the longest prefix of its prompt already in
    `store` (KV of earlier calls) and leaves every prompt's KV there. With `share_prefix`
    the rows' common prefix, where not cached, first runs once per adapter (and is
    cached), as in `prefill`. `adapters` names each row's adapter (the cache's key);
    `mixed`: rows differ in it, so the model gets `adapter_names`.

    Layout: `[pads][cached][pads][new]` with an explicit attention mask and position
    ids; a row sees exactly its own tokens at positions 0..n-1."""
    from transformers import DynamicCache

    device = model.device
    rows = len(seqs)
    computed = 0
    if share_prefix and rows > 1:
        common = min(common_prefix_len(seqs), min(len(s) for s in seqs) - 1)
        for adapter in sorted(set(adapters)) if common > 0 else []:
            computed += _cache_prefix(model, seqs[0][:common], adapter, store, mixed)
    found = [store.match(a, s, limit=len(s) - 1) for s, a in zip(seqs, adapters, strict=True)]
    width_c = max(f.length for f in found)
    cache = DynamicCache(config=model.config)
    mask_BC = torch.zeros((rows, width_c), dtype=torch.long)
    if width_c > 0:
        kv = None
        for b, f in enumerate(found):
            if f.length == 0:
                continue
            row_kv = store.gather(f)
            if kv is None:
                layers, _, heads, _, dim = row_kv.shape
                kv = row_kv.new_zeros((layers, 2, rows, heads, width_c, dim))
            kv[:, :, b, :, width_c - f.length :] = row_kv
            mask_BC[b, width_c - f.length :] = 1
        assert kv is not None
        for layer in range(kv.shape[0]):
            cache.update(kv[layer, 0].to(device), kv[layer, 1].to(device), layer)
    tails = [list(s[f.length :]) for s, f in zip(seqs, found, strict=True)]
    ids_BS, real_BS = _left_padded(tails, pad_id)
    before_B = torch.tensor([f.length for f in found], dtype=torch.long)
    pos_BS = (before_B.unsqueeze(1) + torch.cumsum(real_BS, dim=1) - 1).clamp(min=0)
    mask_BK = torch.cat([mask_BC, real_BS], dim=1)
    if mixed:
        kwargs = {**kwargs, "adapter_names": list(adapters)}
    out = _extend(model, cache, ids_BS, mask_BK, pos_BS, **kwargs)
    computed += sum(len(t) for t in tails)
    end = mask_BK.shape[1]
    for b, (seq, f, tail) in enumerate(zip(seqs, found, tails, strict=True)):
        store.insert(adapters[b], seq, _row_kv(cache, b, end - len(tail), end), start=f.length)
    next_pos_B = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    width = ids_BS.shape[1]
    return Prefill(cache, mask_BK.to(device), next_pos_B.to(device), out, width, width_c, computed)


def _cache_prefix(
    model: Any, prefix: Sequence[int], adapter: str, store: PrefixCache, mixed: bool
) -> int:
    """Make sure `prefix` is in `store` for `adapter`, running what is missing (batch 1);
    returns the tokens computed."""
    from transformers import DynamicCache

    found = store.match(adapter, prefix, count=False)
    if found.length >= len(prefix):
        return 0
    cache = DynamicCache(config=model.config)
    if found.length > 0:
        kv = store.gather(found).to(model.device)
        for layer in range(kv.shape[0]):
            cache.update(kv[layer, 0].unsqueeze(0), kv[layer, 1].unsqueeze(0), layer)
    ids_1S = torch.tensor([list(prefix[found.length :])], dtype=torch.long)
    pos_1S = torch.arange(found.length, len(prefix)).unsqueeze(0)
    mask_1K = torch.ones((1, len(prefix)), dtype=torch.long)
    names = {"adapter_names": [adapter]} if mixed else {}
    _extend(model, cache, ids_1S, mask_1K, pos_1S, logits_to_keep=1, **names)
    store.insert(adapter, prefix, _row_kv(cache, 0, found.length, len(prefix)), found.length)
    return len(prefix) - found.length


def _row_kv(cache: Any, row: int, start: int, end: int) -> torch.Tensor:
    """Row `row`'s KV at cache positions [start, end) as `[layers, 2, heads, n, dim]`."""
    return torch.stack(
        [
            torch.stack([layer.keys[row, :, start:end], layer.values[row, :, start:end]])
            for layer in cache.layers
        ]
    )


PACKED_TAILS_MAX = 64  # tokens of tails packed after one stem (`prefill_grouped`)


@dataclass
class GroupedPrefill:
    """Outputs after a shared prefix, per-group stems and per-row tails (see
    `prefill_grouped`): `locate(b, i)` is the (row, column) in `out`'s sequence dimension
    of row b's token i (i at or after its stem's end)."""

    out: Any
    locate: Callable[[int, int], tuple[int, int]]
    computed_tokens: int


def prefill_grouped(
    model: Any,
    seqs: Sequence[Sequence[int]],
    prefix_len: int,
    stem_ends: Sequence[int],
    pad_id: int,
    **kwargs: Any,
) -> GroupedPrefill:
    """Run rows as a two-level tree: a prefix all rows share, a stem per group, a tail per row.

    `seqs[b][:prefix_len]` must be the same for every row; rows with equal
    `seqs[b][:stem_ends[b]]` form a group (a learner's rows that answer the same prompt).
    The prefix runs once (batch 1), then each group's stem once, left-padded after it.
    Short tails (at most `PACKED_TAILS_MAX` tokens a group: constrained answers) follow
    their stem in the same sequence, each seeing the prefix, the stem and its own earlier
    tokens only (a tree-shaped attention mask, positions continuing the stem's): one
    forward, no per-row copy of the stem's keys and values. Longer tails (free text) run
    after, one left-padded row each from a copy of its group's KV cache. Either way every
    row sees exactly its own tokens at positions 0..n-1 (explicit masks and position ids),
    and with gradients on they flow back through the shared computations."""
    from transformers import DynamicCache

    device = model.device
    if any(end < prefix_len or end >= len(s) for s, end in zip(seqs, stem_ends, strict=True)):
        raise ValueError("every stem must end at or after the prefix and before the row's end")
    groups: dict[tuple[int, ...], int] = {}
    group_of_row = [
        groups.setdefault(tuple(seq[:end]), len(groups))
        for seq, end in zip(seqs, stem_ends, strict=True)
    ]
    stems = [list(key[prefix_len:]) for key in groups]
    tails = [list(seq[end:]) for seq, end in zip(seqs, stem_ends, strict=True)]
    cache = DynamicCache(config=model.config)
    computed = 0
    if prefix_len > 0:
        ids_1P = torch.tensor([list(seqs[0][:prefix_len])], device=device)
        model(input_ids=ids_1P, use_cache=True, logits_to_keep=1, **cache_kwarg(model, cache))
        cache.batch_repeat_interleave(len(stems))
        computed += prefix_len
    per_group = [0] * len(stems)
    for g, tail in zip(group_of_row, tails, strict=True):
        per_group[g] += len(tail)
    if max(per_group) <= PACKED_TAILS_MAX:
        out, locate = _tails_after_stems(
            model, cache, prefix_len, stems, group_of_row, tails, pad_id, **kwargs
        )
        return GroupedPrefill(out, locate, computed + sum(map(len, stems)) + sum(per_group))
    mask_GK = torch.ones((len(stems), prefix_len), dtype=torch.long)
    if max(len(s) for s in stems) > 0:
        ids_GS, real_GS = _left_padded(stems, pad_id)
        pos_GS = (prefix_len + torch.cumsum(real_GS, dim=1) - 1).clamp(min=0)
        mask_GK = torch.cat([mask_GK, real_GS], dim=1)
        _extend(model, cache, ids_GS, mask_GK, pos_GS, logits_to_keep=1)
        computed += sum(len(s) for s in stems)
    index_R = torch.tensor(group_of_row, dtype=torch.long)
    if cache.get_seq_length() > 0:
        cache.batch_select_indices(index_R.to(device))
    ids_RT, real_RT = _left_padded(tails, pad_id)
    before_R = torch.tensor([len(stems[g]) + prefix_len for g in group_of_row], dtype=torch.long)
    pos_RT = (before_R.unsqueeze(1) + torch.cumsum(real_RT, dim=1) - 1).clamp(min=0)
    mask_RK = torch.cat([mask_GK[index_R], real_RT], dim=1)
    out = _extend(model, cache, ids_RT, mask_RK, pos_RT, **kwargs)
    computed += sum(len(t) for t in tails)
    width = ids_RT.shape[1]
    ends = list(stem_ends)

    def apart(b: int, i: int) -> tuple[int, int]:
        return b, width - len(tails[b]) + i - ends[b]

    return GroupedPrefill(out, apart, computed)


def _tails_after_stems(
    model: Any,
    cache: Any,
    prefix_len: int,
    stems: list[list[int]],
    group_of_row: list[int],
    tails: list[list[int]],
    pad_id: int,
    **kwargs: Any,
) -> tuple[Any, Callable[[int, int], tuple[int, int]]]:
    """Each group's stem, then its rows' tails, as one left-padded sequence per group over
    the prefix's cache. A stem token sees the prefix and the stem up to itself; a tail
    token the prefix, the whole stem and its own tail up to itself; a pad only itself
    (nothing reads it)."""
    offsets: list[int] = []  # where each row's tail starts in its group's sequence
    rows_of: list[list[int]] = [list(stem) for stem in stems]
    owner: list[list[int]] = [[-1] * len(stem) for stem in stems]  # -1: the stem
    for b, (g, tail) in enumerate(zip(group_of_row, tails, strict=True)):
        offsets.append(len(rows_of[g]))
        rows_of[g] += tail
        owner[g] += [b] * len(tail)
    width = max(len(r) for r in rows_of)
    ids_GW = torch.full((len(stems), width), pad_id, dtype=torch.long)
    pos_GW = torch.zeros((len(stems), width), dtype=torch.long)
    sees_GWW = torch.eye(width, dtype=torch.bool).repeat(len(stems), 1, 1)
    for g, (row, who) in enumerate(zip(rows_of, owner, strict=True)):
        pad, stem_len = width - len(row), len(stems[g])
        ids_GW[g, pad:] = torch.tensor(row, dtype=torch.long)
        owner_W = torch.tensor(who, dtype=torch.long)
        index = torch.arange(len(row))
        # the stem's own positions, then each tail's continuing after the stem
        first = torch.tensor([offsets[b] if b >= 0 else 0 for b in who], dtype=torch.long)
        pos_GW[g, pad:] = prefix_len + torch.where(owner_W < 0, index, stem_len + index - first)
        same = owner_W[:, None] == owner_W[None, :]
        stem_key = (owner_W < 0)[None, :]
        causal = index[None, :] <= index[:, None]
        sees_GWW[g, pad:, pad:] = causal & (same | stem_key)
    sees_prefix = torch.ones((len(stems), width, prefix_len), dtype=torch.bool)
    for g, row in enumerate(rows_of):
        sees_prefix[g, : width - len(row)] = False  # a pad sees only itself
    mask = torch.cat([sees_prefix, sees_GWW], dim=2).unsqueeze(1)  # [G, 1, W, P + W]
    out = _extend(model, cache, ids_GW, mask, pos_GW, **kwargs)
    pads = [width - len(row) for row in rows_of]
    stem_lens = [len(stem) for stem in stems]

    def locate(b: int, i: int) -> tuple[int, int]:
        g = group_of_row[b]
        return g, pads[g] + offsets[b] + i - (prefix_len + stem_lens[g])

    return out, locate


def _extend(
    model: Any,
    cache: Any,
    ids: torch.Tensor,
    mask: torch.Tensor,
    pos: torch.Tensor,
    **kwargs: Any,
) -> Any:
    """Run `ids` (with their attention mask over cache + ids and positions) on top of
    `cache`, extending it; returns the model output."""
    device = model.device
    return model(
        input_ids=ids.to(device),
        attention_mask=mask.to(device),
        position_ids=pos.to(device),
        use_cache=True,
        **cache_kwarg(model, cache),
        **kwargs,
    )


def _left_padded(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, real) as [rows, width] tensors, each row right-aligned after pads."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    real = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row) :] = torch.tensor(list(row), dtype=torch.long)
            real[i, width - len(row) :] = 1
    return ids, real


def packed_hidden(model: Any, seqs: Sequence[Sequence[int]]) -> torch.Tensor:
    """Final hidden states `[1, sum of lengths, H]` of `seqs` run whole and concatenated
    into one sequence without padding: positions restart at 0 for each row, and with no
    attention mask and no cache transformers reads the rows' boundaries from the position
    ids and keeps attention within each row (a block-causal mask for sdpa, varlen for
    flash attention). The same values as the rows run separately (tested)."""
    device = model.device
    ids_1T = torch.tensor([[t for seq in seqs for t in seq]], device=device)
    pos_1T = torch.tensor([[p for seq in seqs for p in range(len(seq))]], device=device)
    out = model(
        input_ids=ids_1T,
        position_ids=pos_1T,
        use_cache=False,
        output_hidden_states=True,
        logits_to_keep=1,
    )
    return out.hidden_states[-1]
