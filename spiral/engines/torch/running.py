"""RunningBatch: rows decoded together one token at a time, joining and leaving between tokens.

A server's requests arrive at any time and want replies of any length. `TorchSampler.
sample` draws a batch of rows from one prefill to the last token, so a request that
arrives during a call waits for it to end. Here the batch is never closed: between two
decode steps, new rows are prefilled (their own batch) and joined to the running ones,
and finished or cancelled rows leave. A short request then waits for at most one decode
step of the others and one prefill, not for a long reply.

Each row carries its own sampling parameters (temperature, top-p, length, stop strings),
its answer constraint and its own random stream, so rows of any parameters share a
step. The draws are the sampler's: inverse CDF from the row's `random.Random` (the seed's
stream for row 0 when seeded), log-probs of the untruncated tempered distribution,
greedy at temperature 0 with log-probs at temperature 1, constrained rows masked to
their legal tokens (draws.py), the sampler's stop rules (`TorchSampler._advance`).

Layout: transformers' KV cache with one row per running request, left-padded to the
longest row (an explicit attention mask and position ids per row, as `prefill.prefill`
makes them), the model's own forward per step (decode.ModelDecoder). When rows join,
the shorter of the two caches is padded on the left; when rows leave, columns no row
attends to any more are cut off. Each join and step runs in the sampler's compute context
(eval mode, inference mode, the LoRA adapter merged: a cached merge, a pointer swap).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from spiral.engines.base import SamplingParams
from spiral.engines.torch.constrained import ConstrainedRow
from spiral.engines.torch.decode import (
    MIN_ROOM_TO_PACK,
    ModelDecoder,
    PackedDecoder,
    packed_decoder,
    with_capacity,
)
from spiral.engines.torch.draws import draw_inverse_cdf, mask_to_allowed, non_finite_error
from spiral.engines.torch.kv_cache import PrefixCache
from spiral.engines.torch.prefill import prefill, prefill_cached, supports_prefix_cache
from spiral.engines.torch.sampler_rows import constrained_row
from spiral.engines.torch.snapshots import TRAINED
from spiral.types import AnswerConstraint, Completion, StopReason

PREFIX_CACHE_MB = 256.0  # a server's prompt KV kept across requests


@dataclass
class RunningRow:
    """One request in the batch: what it asked and what it has drawn so far."""

    owner: Any  # the caller's handle (a server's job)
    params: SamplingParams
    constraint: AnswerConstraint | None
    rng: random.Random
    constrained: ConstrainedRow | None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stop_reason: StopReason | None = None
    limit: int | None = None  # as sampler_rows.Row; a server checks the context itself


class RunningBatch:
    """Rows of one TorchSampler decoded together; `join` and `leave` between `step`s."""

    def __init__(self, sampler: Any, prefix_cache_mb: float = PREFIX_CACHE_MB) -> None:
        self.sampler = sampler
        # the KV of earlier prompts (a chat template's system prompt, a game's rules)
        self.prefix_cache = sampler.prefix_cache
        if (
            self.prefix_cache is None
            and prefix_cache_mb > 0
            and supports_prefix_cache(sampler.model)
        ):
            self.prefix_cache = PrefixCache(int(prefix_cache_mb * 2**20))
        self.rows: list[RunningRow] = []
        self._decoder: ModelDecoder | PackedDecoder | None = None
        self._logits_BV: torch.Tensor | None = None  # each row's next-token logits

    def __len__(self) -> int:
        return len(self.rows)

    def join(
        self,
        prompts: Sequence[Sequence[int]],
        params: Sequence[SamplingParams],
        constraints: Sequence[AnswerConstraint | None],
        owners: Sequence[Any],
    ) -> None:
        """Prefill `prompts` and add them to the batch (one row each)."""
        if not prompts:
            return
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token (e.g. the chat template's)")
        sampler = self.sampler
        rows = []
        for p, c, owner in zip(params, constraints, owners, strict=True):
            seed = p.seed if p.seed is not None else random.SystemRandom().getrandbits(62)
            rng = random.Random(seed * 1_000_003)  # as `sample` seeds its row 0
            rows.append(RunningRow(owner, p, c, rng, constrained_row(c, p, sampler.eos_ids)))
        sampler._check_current()
        adapter = sampler.adapter or TRAINED
        seqs = [list(p) for p in prompts]
        with sampler._computing(adapter):
            if self.prefix_cache is not None:
                pre = prefill_cached(sampler.model, seqs, [adapter] * len(seqs), sampler.pad_id,
                                     self.prefix_cache, logits_to_keep=1)  # fmt: skip
            else:
                pre = prefill(sampler.model, seqs, 0, sampler.pad_id, logits_to_keep=1)
            logits_BV = pre.out.logits[:, -1, :]
            room = max(p.max_tokens for p in params) + 1
            if self._decoder is None:
                packed = None
                if sampler.packed_decode:  # packed once, kept on the model for later batches
                    room = max(room, MIN_ROOM_TO_PACK)
                    packed = packed_decoder(sampler.model, pre, room, adapter)
                self._decoder = packed or ModelDecoder(sampler.model, pre, None)
                self._logits_BV = logits_BV
            else:
                assert self._logits_BV is not None
                _join_caches(self._decoder, pre, room)
                self._logits_BV = torch.cat([self._logits_BV, logits_BV])
        self.rows += rows

    def leave(self, owners: Sequence[Any]) -> None:
        """Drop the rows of `owners` (cancelled requests) from the batch."""
        gone = {id(o) for o in owners}
        self._keep([b for b, row in enumerate(self.rows) if id(row.owner) not in gone])

    def step(self) -> list[RunningRow]:
        """Draw one token for every row; returns the rows that finished (they leave)."""
        if not self.rows:
            return []
        assert self._logits_BV is not None and self._decoder is not None
        tokens = self._draw(self._logits_BV)
        finished = [row for row in self.rows if row.stop_reason is not None]
        live = [b for b, row in enumerate(self.rows) if row.stop_reason is None]
        self._keep(live)
        if self.rows:
            with self.sampler._computing(self.sampler.adapter or TRAINED):
                fed = torch.tensor([tokens[b] for b in live], device=self._logits_BV.device)
                _ensure_room(self._decoder, 64)
                self._logits_BV = self._decoder.step(fed)
        return finished

    def completion(self, row: RunningRow) -> Completion:
        return self.sampler._completion(row, row.constraint)

    def _keep(self, index: list[int]) -> None:
        """Keep rows `index` (in order): the cache, the logits, and the columns still used."""
        if len(index) == len(self.rows):
            return
        self.rows = [self.rows[b] for b in index]
        if not self.rows:
            self._decoder, self._logits_BV = None, None
            return
        assert self._decoder is not None and self._logits_BV is not None
        with torch.inference_mode():
            index_B = torch.tensor(index, device=self._logits_BV.device)
            self._decoder.select(index_B)
            self._logits_BV = self._logits_BV[index_B]
            _trim_unused(self._decoder)

    def _draw(self, logits_BV: torch.Tensor) -> list[int]:
        """One token per row under the row's own parameters; records tokens, log-probs and
        stop reasons."""
        with torch.inference_mode():
            temps = [r.params.temperature if r.params.temperature > 0 else 1.0 for r in self.rows]
            scaled_BV = logits_BV.float() / torch.tensor(temps, device=logits_BV.device)[:, None]
            finite = bool(torch.isfinite(scaled_BV).all())
            if not finite:
                raise non_finite_error()
            mask_to_allowed(scaled_BV, [r.constrained for r in self.rows])
            logp_BV = torch.log_softmax(scaled_BV, dim=-1)
            picks = logp_BV.argmax(dim=-1).tolist()
            by_top_p: dict[float, list[int]] = {}
            for b, row in enumerate(self.rows):
                forced = row.constrained.forced_token() if row.constrained else None
                if forced is not None:
                    picks[b] = forced
                elif row.params.temperature > 0:
                    by_top_p.setdefault(row.params.top_p, []).append(b)
            for top_p, rows in by_top_p.items():
                uniforms = [[self.rows[b].rng.random()] for b in rows]
                drawn = draw_inverse_cdf(logp_BV[torch.tensor(rows)], uniforms, top_p)
                for b, token in zip(rows, drawn[:, 0].tolist(), strict=True):
                    picks[b] = token
            values = logp_BV.gather(1, torch.tensor(picks)[:, None])[:, 0].tolist()
        for b, row in enumerate(self.rows):
            forced = row.constrained is not None and row.constrained.forced_token() is not None
            row.tokens.append(picks[b])
            row.logprobs.append(0.0 if forced else values[b])
            self.sampler._advance(row, picks[b], row.params)
        return picks


def _left_pad(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    missing = width - t.shape[dim]
    if missing == 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([t.new_zeros(shape), t], dim=dim)


def _join_caches(decoder: Any, pre: Any, room: int) -> None:
    """Append the rows of prefill `pre` to `decoder`'s, both left-padded to one width;
    a packed decoder's buffers then have `room` free columns."""
    if isinstance(decoder, PackedDecoder):
        n = decoder.length
        width = max(n, pre.mask_BK.shape[1])
        for i, layer in enumerate(pre.cache.layers):
            keys = decoder.keys[i]
            joined = [_left_pad(keys[:, :, :n], width, 2), _left_pad(layer.keys.to(keys), width, 2)]
            decoder.keys[i] = _with_room(torch.cat(joined), room)
            values = decoder.values[i]
            joined = [
                _left_pad(values[:, :, :n], width, 2),
                _left_pad(layer.values.to(values), width, 2),
            ]
            decoder.values[i] = _with_room(torch.cat(joined), room)
        keep = [
            _left_pad(decoder.keep_BT[:, :n], width, 1),
            _left_pad(pre.mask_BK.bool(), width, 1),
        ]
        decoder.keep_BT = torch.nn.functional.pad(torch.cat(keep), (0, room), value=True)
        decoder.length = width
    else:
        width = max(decoder.mask_BK.shape[1], pre.mask_BK.shape[1])
        for mine, theirs in zip(decoder.cache.layers, pre.cache.layers, strict=True):
            both_k = [_left_pad(mine.keys, width, 2), _left_pad(theirs.keys, width, 2)]
            both_v = [_left_pad(mine.values, width, 2), _left_pad(theirs.values, width, 2)]
            mine.keys, mine.values = torch.cat(both_k), torch.cat(both_v)
        masks = [_left_pad(decoder.mask_BK, width, 1), _left_pad(pre.mask_BK, width, 1)]
        decoder.mask_BK = torch.cat(masks)
    decoder.pos_B = torch.cat([decoder.pos_B, pre.next_pos_B.to(decoder.pos_B)])


def _with_room(kv_BKTD: torch.Tensor, room: int) -> torch.Tensor:
    """`kv_BKTD` followed by `room` free columns (decode.py's buffer with room)."""
    return with_capacity(kv_BKTD, kv_BKTD.shape[2] + room, kv_BKTD.dtype)


def _ensure_room(decoder: Any, room: int) -> None:
    """A packed decoder's buffers with at least one free column (else `room` more)."""
    if isinstance(decoder, PackedDecoder) and decoder.length >= decoder.keys[0].shape[2]:
        n = decoder.length
        decoder.keys = [_with_room(k[:, :, :n], room) for k in decoder.keys]
        decoder.values = [_with_room(v[:, :, :n], room) for v in decoder.values]
        decoder.keep_BT = torch.nn.functional.pad(decoder.keep_BT[:, :n], (0, room), value=True)


def _trim_unused(decoder: Any) -> None:
    """Cut the leading cache columns that no row attends to (pads of rows that left)."""
    if isinstance(decoder, PackedDecoder):
        used = decoder.keep_BT[:, : decoder.length].any(dim=0)
    else:
        used = decoder.mask_BK.bool().any(dim=0)
    first = int(used.int().argmax())
    if first == 0:
        return
    if isinstance(decoder, PackedDecoder):
        decoder.keys = [k[:, :, first:] for k in decoder.keys]
        decoder.values = [v[:, :, first:] for v in decoder.values]
        decoder.keep_BT = decoder.keep_BT[:, first:]
        decoder.length -= first
        return
    for layer in decoder.cache.layers:
        layer.keys, layer.values = layer.keys[:, :, first:], layer.values[:, :, first:]
    decoder.mask_BK = decoder.mask_BK[:, first:]
