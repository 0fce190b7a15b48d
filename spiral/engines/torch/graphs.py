"""Decode steps replayed as CUDA graphs over a static KV cache.

On a GPU the eager decode step (`decode.PackedDecoder`) is bound by kernel launches: a
16-row step of a 0.6B model took 41-50 ms of wall time around ~10 ms of GPU work on an
H100 (`docs/results.md`). A CUDA graph launches the whole step at once, but it replays
fixed kernels on fixed addresses, so everything the step reads or writes must live in
buffers made once:

- the KV cache, `rows x capacity` per layer, with the prefill copied in at the start of
  each sampler call; the column a step writes is a one-element device tensor advanced
  inside the step (no Python integer that would change the kernels);
- attention over the filled part of the cache rounded up to `CAPACITY_STEP` columns (the
  *span*), under a boolean mask of the columns each row may see (its prompt without pads,
  and every decoded column): a long cache whose rows are still short reads only the
  columns in use, and a graph serves every step within one span;
- the input ids, each row's position, and the logits out.

A graph is captured per padded batch size (`SIZES`: the live rows rounded up to a power of
two) and span on first use, and kept with the decoder (all of them in one memory pool,
as they never run at once, writing one logits buffer per size): a sampler call whose
rows shrink (rows that ended, `select`) replays the smaller graph over the leading rows
of the same buffers. The padded rows compute values nobody reads (each attends at least to its own column, so
nothing is NaN). The decoder is kept on the model per adapter and reused by later calls
while its packed weights are the current ones and the call fits its rows and capacity;
new weights (a learner update, a new merge) make a new decoder, and
`decode.drop_packed` frees it with the packed weights.

`StaticDecoder(capture=False)` runs the same step eagerly over the same buffers: the
CPU tests check it against the eager step token for token, and a GPU test checks the
replayed graphs against it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from spiral.engines.torch.decode import _SLOT as PACKED_SLOT
from spiral.engines.torch.decode import (
    GRAPH_SLOT,
    Decoder,
    PackedDecoder,
    PackedWeights,
    decode_weights,
    finish_layer,
    rotated_qkv,
)

SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
CAPACITY_STEP = 256  # capacities are rounded up to a multiple of this


def padded_size(rows: int) -> int:
    """The smallest captured batch size that holds `rows` (more rows: `rows` itself)."""
    return next((s for s in SIZES if s >= rows), rows)


class StaticDecoder:
    """`PackedWeights`' decode step over static buffers (module docstring)."""

    def __init__(
        self, weights: PackedWeights, rows: int, capacity: int, dtype: Any, capture: bool
    ) -> None:
        self.w = weights
        device = weights.embed.weight.device
        self.rows_max, self.capacity = padded_size(rows), capacity
        kv = (self.rows_max, weights.kv_heads, capacity, weights.head_dim)
        layers = len(weights.layers)
        self.keys = [torch.zeros(kv, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(kv, dtype=dtype, device=device) for _ in range(layers)]
        self.keep_RC = torch.zeros((self.rows_max, capacity), dtype=torch.bool, device=device)
        self.pos_R = torch.zeros(self.rows_max, dtype=torch.long, device=device)
        self.ids_R = torch.zeros(self.rows_max, dtype=torch.long, device=device)
        self.col = torch.zeros(1, dtype=torch.long, device=device)  # the column written next
        self.capture = capture
        self.pool = torch.cuda.graph_pool_handle() if capture else None
        self.graphs: dict[tuple[int, int], Any] = {}  # (padded rows, span) -> graph
        self.logits: dict[int, torch.Tensor] = {}  # padded rows -> the graphs' output
        self.spans: set[int] = set()  # the spans stepped over (the tests read it)
        self.live = 0
        self.length = 0  # columns filled, on the host (no device read to check room)
        self.captures = 0  # graphs captured over this decoder's life (the tests read it)

    def fits(self, weights: PackedWeights, rows: int, capacity: int, dtype: Any) -> bool:
        return (
            weights is self.w
            and rows <= self.rows_max
            and capacity <= self.capacity
            and self.keys[0].dtype == dtype
        )

    def load(self, pre: Any) -> None:
        """Start a sampler call: copy the prefilled batch `pre` into the buffers."""
        rows, width = pre.mask_BK.shape
        for i, layer in enumerate(pre.cache.layers):
            self.keys[i][:rows, :, :width].copy_(layer.keys)
            self.values[i][:rows, :, :width].copy_(layer.values)
        self.keep_RC.zero_()
        self.keep_RC[:rows, :width] = pre.mask_BK.bool()
        self.pos_R.zero_()
        self.pos_R[:rows] = pre.next_pos_B
        self.col.fill_(width)
        self.live, self.length = rows, int(width)

    def select(self, index_B: torch.Tensor) -> None:
        """Keep rows `index_B` (in this order; a row may repeat) as the leading rows."""
        n = int(index_B.shape[0])
        if n > self.rows_max:  # a node branched into more rows than the buffers hold
            self._grow(padded_size(n))
        for buf in (*self.keys, *self.values, self.keep_RC, self.pos_R):
            buf[:n] = buf[: self.live].index_select(0, index_B)
        self.live = n

    def _grow(self, rows: int) -> None:
        """Buffers of `rows` rows holding the live ones; the graphs, captured over the old
        buffers, are dropped (captured again on use)."""

        def grown(buf: torch.Tensor) -> torch.Tensor:
            out = buf.new_zeros((rows, *buf.shape[1:]))
            out[: self.live] = buf[: self.live]
            return out

        self.keys = [grown(k) for k in self.keys]
        self.values = [grown(v) for v in self.values]
        self.keep_RC, self.pos_R = grown(self.keep_RC), grown(self.pos_R)
        self.ids_R = self.ids_R.new_zeros(rows)
        self.rows_max = rows
        self.graphs.clear()
        self.logits.clear()
        if self.capture:  # the old pool went with its last graph: capture into a new one
            self.pool = torch.cuda.graph_pool_handle()

    def step(self, ids_B: torch.Tensor) -> torch.Tensor:
        rows = int(ids_B.shape[0])
        if rows != self.live:
            raise ValueError(f"{rows} ids for {self.live} live rows")
        if self.length >= self.capacity:
            raise RuntimeError("the decode cache is full: more steps than the room it was made for")
        self.length += 1
        key = (padded_size(rows), span_for(self.length, self.capacity))
        self.spans.add(key[1])
        self.ids_R[:rows].copy_(ids_B)
        if self.capture:
            if key not in self.graphs:
                self._capture(key)
            self.graphs[key].replay()
            out = self.logits[key[0]]
        else:
            out = self._forward(*key)
        return out[:rows].clone()

    def _capture(self, key: tuple[int, int]) -> None:
        """Capture the step for `key` (rows, span): warm up on a side stream (kernels
        choose their algorithms), put back the state the warm-up advanced, then record."""
        col, pos = self.col.clone(), self.pos_R.clone()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            warm = self._forward(*key)
        torch.cuda.current_stream().wait_stream(stream)
        self.col.copy_(col)
        self.pos_R.copy_(pos)
        # one output buffer per size, whatever the span: the graph's last kernel fills it
        self.logits.setdefault(key[0], torch.empty_like(warm))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            self.logits[key[0]].copy_(self._forward(*key))
        self.graphs[key] = graph
        self.captures += 1

    def _forward(self, size: int, span: int) -> torch.Tensor:
        """One token for the first `size` rows over the first `span` columns; advances
        each row's position and the column. Shapes depend on `size` and `span` only."""
        w = self.w
        heads, kv_heads = w.heads, w.kv_heads
        keep_RC = self.keep_RC[:size, :span]
        keep_RC.index_fill_(1, self.col, True)  # the column written now: every row sees it
        mask_R11C = keep_RC.view(size, 1, 1, span)
        pos_R = self.pos_R[:size]
        h_RH = w.embed(self.ids_R[:size])
        cos, sin = w.rotary(h_RH, pos_R.unsqueeze(1))
        for i, layer in enumerate(w.layers):
            qk_RND, v_RKD = rotated_qkv(w, layer, h_RH, cos, sin)
            keys, values = self.keys[i][:size, :, :span], self.values[i][:size, :, :span]
            keys.index_copy_(2, self.col, qk_RND[:, heads:].unsqueeze(2).to(keys.dtype))
            values.index_copy_(2, self.col, v_RKD.unsqueeze(2))
            q_RH1D = qk_RND[:, :heads].unsqueeze(2)
            out_RH = F.scaled_dot_product_attention(
                q_RH1D, keys, values, attn_mask=mask_R11C, scale=layer.scaling,
                enable_gqa=heads != kv_heads,
            )  # fmt: skip
            h_RH = finish_layer(layer, h_RH, out_RH)
        pos_R.add_(1)
        self.col.add_(1)
        return w.head(w.norm(h_RH))


def span_for(length: int, capacity: int) -> int:
    """The columns a step over `length` filled columns attends to: `length` rounded up
    to `CAPACITY_STEP`, at most `capacity`."""
    return min(capacity, -(-length // CAPACITY_STEP) * CAPACITY_STEP)


def capacity_for(width: int, room: int) -> int:
    """The cache capacity a call needs, rounded up to `CAPACITY_STEP` (fewer shapes)."""
    need = width + room
    return -(-need // CAPACITY_STEP) * CAPACITY_STEP


def static_decoder(
    model: Any, weights: PackedWeights, pre: Any, room: int, adapter: str, capture: bool
) -> StaticDecoder:
    """The model's kept decoder for `adapter` if this call fits it, else a new one (the
    old one freed first); loaded with the prefilled batch `pre`."""
    slots: dict[str, StaticDecoder] = model.__dict__.setdefault(GRAPH_SLOT, {})
    packed = model.__dict__.get(PACKED_SLOT, {})
    for name in [n for n in slots if n not in packed]:  # its packed weights were evicted
        del slots[name]
    rows, width = pre.mask_BK.shape
    dtype = pre.cache.layers[0].keys.dtype
    capacity = capacity_for(int(width), room)
    kept = slots.get(adapter)
    if kept is None or not kept.fits(weights, int(rows), capacity, dtype):
        slots.pop(adapter, None)
        kept = StaticDecoder(weights, int(rows), capacity, dtype, capture)
        slots[adapter] = kept
    kept.load(pre)
    return kept


def step_decoder(model: Any, pre: Any, room: int, adapter: str) -> Decoder | None:
    """The packed step as the sampler runs it: replayed as CUDA graphs over static
    buffers on CUDA, the eager `PackedDecoder` elsewhere; None where it stands aside
    (`decode.decode_weights`)."""
    weights = decode_weights(model, pre, room, adapter)
    if weights is None:
        return None
    if pre.mask_BK.device.type == "cuda":
        return static_decoder(model, weights, pre, room, adapter, capture=True)
    return PackedDecoder(weights, pre, room)
