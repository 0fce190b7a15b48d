"""The decode step: one new token for every row of a prefilled batch.

The sampler's loop asks a `Decoder` for the next logits (`step`) and tells it which rows
live on (`select`: a finished row leaves, a branching node's cache row is repeated).
Two decoders fit behind it:

- `ModelDecoder`: the model's own forward with transformers' KV cache, one call per
  token. Any model, PEFT's mixed-adapter batches, LoRA layers computed unmerged.
- `PackedDecoder`: our own step for Llama-shaped models (`llama`, `qwen2`, `qwen3`: pre-norm
  decoder layers, rotary positions, grouped-query attention, a gated SiLU MLP). Where
  the model's forward spends a 16-row step of a 135M model on a CPU besides the
  weights: seven separate projections per layer through `F.linear`, transformers'
  dynamic cache concatenating a copy of the whole cache at every token, and (bf16) the
  attention converting every layer's whole key cache to fp32 at every step. This step
  runs the query/key/value projections as one matrix and gate/up as another
  (concatenated once), every projection through oneDNN's prepacked linear on a CPU
  where oneDNN takes the dtype (`cpu.prepacks`; the weight reordered once for the
  kernel; 1.25-1.7x faster per product than `F.linear` at 16 rows, measured), rotary embedding on queries and keys together, and
  writes the new keys and values in place into a cache preallocated for the whole call,
  keeping keys in fp32 where the attention scores from fp32 keys. (It dispatches ~25%
  fewer torch operations per layer than the model's forward, profiled; the time saved
  is mostly in the products and the copies.)

  It computes exactly what the model computes: the norms, the embedding, the rotary
  tables and the activation are the model's own modules, the rotary and attention
  formulas are transformers' (on a CPU in bf16 the attention is `attention.py`'s matmul
  path, which the model itself uses there; elsewhere torch's sdpa), so on this project's
  CPU its bf16 logits are bit-identical to the model's forward and its fp32 logits agree
  to rounding (`tests/engines/test_decode.py`).

  It stands aside (`decode_weights` returns None, and the sampler uses `ModelDecoder`)
  for other architectures, sliding-window layers, a LoRA adapter that is active and not
  merged (it would be ignored), rows of several adapters, quantized or non-float weights.

Packed weights are one more copy of the model's linear weights (~270 MB for the embedded
model in bf16). They are made on first use from the weights the model holds then (under
`merged.py`'s swap, the merged ones) and kept on the model per adapter, keyed by each
source weight's and bias's storage and version counter, with the sources pinned so that
an address cannot be reused by other weights: a sampler made after an update, or after a
merge of new adapter weights, gets newly packed weights (tested). `drop_packed(model, adapter)`
frees them; the learner does when it learns, as it frees the merge. A call that may
decode fewer than `MIN_ROOM_TO_PACK` tokens does not pack (it uses weights packed already).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from spiral.engines.torch import cpu
from spiral.engines.torch.attention import grouped_attention, stacked_mask
from spiral.engines.torch.loading import cache_keyword
from spiral.engines.torch.merged import drop_merged, drop_slot
from spiral.engines.torch.precision import compute_dtype

ARCHITECTURES = ("llama", "qwen2", "qwen3")
_SLOT = "_spiral_packed_decode"
GRAPH_SLOT = "_spiral_graph_decoder"  # graphs.py's static decoders, freed with the weights
MAX_PACKED = 2  # adapters kept, as merged.MAX_MERGED: the trained one and the member sampled last
# Packing takes ~0.2-0.3 s for the embedded model on this project's CPU and our step saves
# ~20-25 ms a token at 16 rows, so a call that may decode fewer tokens than this uses
# the model's forward unless the weights are packed already (a make-train Kuhn step,
# answers of <= 8 tokens, sampled 2% slower when it packed: docs/results.md).
MIN_ROOM_TO_PACK = 16


class Decoder(Protocol):
    """The decode loop's view of a prefilled batch (module docstring)."""

    def step(self, ids_B: torch.Tensor) -> torch.Tensor:
        """Feed one token per row; returns the next logits `[B, vocab]`."""
        ...

    def select(self, index_B: torch.Tensor) -> None:
        """Keep cache rows `index_B` (in this order; a row may repeat)."""
        ...


class ModelDecoder:
    """The model's own forward over transformers' KV cache (`prefill.Prefill`)."""

    def __init__(self, model: Any, pre: Any, adapters_B: list[str] | None) -> None:
        self.model = model
        self.cache, self.mask_BK, self.pos_B = pre.cache, pre.mask_BK, pre.next_pos_B
        self.adapters_B = adapters_B  # per row, for PEFT's mixed batch; None: one adapter
        self.cache_kw = cache_keyword(model)  # once, not per token

    def select(self, index_B: torch.Tensor) -> None:
        self.cache.batch_select_indices(index_B)
        self.mask_BK, self.pos_B = self.mask_BK[index_B], self.pos_B[index_B]
        if self.adapters_B is not None:
            self.adapters_B = [self.adapters_B[i] for i in index_B.tolist()]

    def step(self, ids_B: torch.Tensor) -> torch.Tensor:
        self.mask_BK = torch.cat([self.mask_BK, torch.ones_like(self.mask_BK[:, :1])], dim=1)
        mixing = {"adapter_names": self.adapters_B} if self.adapters_B is not None else {}
        out = self.model(
            input_ids=ids_B.unsqueeze(1),
            attention_mask=self.mask_BK,
            position_ids=self.pos_B.unsqueeze(1),
            use_cache=True,
            **{self.cache_kw: self.cache},
            **mixing,
        )
        self.pos_B = self.pos_B + 1
        return out.logits[:, -1, :]


Linear = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class _Layer:
    input_norm: Any  # the model's own modules
    post_norm: Any
    qk_norms: tuple[Any, Any] | None  # Qwen3's per-head norms of queries and keys
    act: Any
    qkv: Linear  # [q | k | v] in one product
    o: Linear
    gate_up: Linear  # [gate | up] in one product
    down: Linear
    scaling: float


@dataclass(frozen=True)
class PackedWeights:
    """One model's decode weights (module docstring)."""

    embed: Any
    rotary: Any
    layers: tuple[_Layer, ...]
    norm: Any
    head: Linear
    heads: int
    kv_heads: int
    head_dim: int
    key: tuple[tuple[int, int], ...]
    pinned: tuple[torch.Tensor, ...]  # the sources, so their addresses stay theirs


def _plain_linear(module: Any) -> torch.nn.Linear | None:
    """The `nn.Linear` a layer computes with now; None where its output is not that
    linear's alone (an active unmerged LoRA adapter, a quantized or other layer)."""
    from peft.tuners.lora import LoraLayer

    if isinstance(module, LoraLayer):
        active = [a for a in module.active_adapters if a in module.lora_A]
        if active and not module.disable_adapters and not module.merged:
            return None
        module = module.get_base_layer()
    if type(module) is not torch.nn.Linear or not module.weight.is_floating_point():
        return None
    return module


def _supported(base: Any) -> bool:
    cfg = base.config
    inner = getattr(base, "model", None)
    return (
        getattr(cfg, "model_type", None) in ARCHITECTURES
        and getattr(cfg, "hidden_act", None) == "silu"
        and not getattr(cfg, "final_logit_softcapping", None)
        and inner is not None
        and all(hasattr(inner, name) for name in ("embed_tokens", "layers", "norm", "rotary_emb"))
        and all(getattr(layer.self_attn, "sliding_window", None) is None for layer in inner.layers)
    )


Pack = Callable[[torch.Tensor, torch.Tensor | None], Linear]


def _packer(device: torch.device, dtype: torch.dtype, rows: int) -> Pack:
    """Make a linear from (weight, bias): oneDNN's prepacked kernel on a CPU where it takes
    `dtype` (`cpu.prepacks`: fp32 wherever torch has oneDNN; bf16 with AVX-512 or
    AVX-NE-CONVERT), else F.linear."""
    if device.type == "cpu" and cpu.prepacks(dtype):

        def packed(weight: torch.Tensor, bias: torch.Tensor | None) -> Linear:
            w = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), rows)
            return lambda x: torch.ops.mkldnn._linear_pointwise(x, w, bias, "none", [], "")

        return packed

    def plain(weight: torch.Tensor, bias: torch.Tensor | None) -> Linear:
        return lambda x: F.linear(x, weight, bias)

    return plain


def _joined(linears: list[torch.nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weight and bias of `linears` as one linear (their outputs concatenated); one
    linear's own tensors, not copies."""
    if len(linears) == 1:
        (lin,) = linears
        return lin.weight.data, lin.bias.data if lin.bias is not None else None
    weight = torch.cat([lin.weight.data for lin in linears])
    if all(lin.bias is None for lin in linears):
        return weight, None
    return weight, torch.cat(
        [lin.bias.data if lin.bias is not None else lin.weight.new_zeros(lin.out_features)
         for lin in linears]
    )  # fmt: skip


def _sources(base: Any) -> list[list[torch.nn.Linear]] | None:
    """Per layer the linears q, k, v, o, gate, up, down; then the head as a last
    one-element list. None where one of them stands aside (`_plain_linear`)."""
    out = []
    for layer in base.model.layers:
        a, m = layer.self_attn, layer.mlp
        modules = (a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj)
        linears = [_plain_linear(mod) for mod in modules]
        if any(lin is None for lin in linears):
            return None
        out.append(linears)
    head = _plain_linear(base.get_output_embeddings())
    if head is None:
        return None
    out.append([head])
    return out  # type: ignore[return-value]


def _packed_layer(module: Any, linears: list[torch.nn.Linear], pack: Pack) -> _Layer:
    q, k, v, o, gate, up, down = linears
    attn = module.self_attn
    return _Layer(
        input_norm=module.input_layernorm,
        post_norm=module.post_attention_layernorm,
        qk_norms=(attn.q_norm, attn.k_norm) if hasattr(attn, "q_norm") else None,
        act=module.mlp.act_fn,
        qkv=pack(*_joined([q, k, v])),
        o=pack(*_joined([o])),
        gate_up=pack(*_joined([gate, up])),
        down=pack(*_joined([down])),
        scaling=float(attn.scaling),
    )


def packed_weights(
    model: Any, adapter: str, rows: int = 16, make: bool = True
) -> PackedWeights | None:
    """The model's decode weights as it computes now (module docstring); None where the
    packed step stands aside, or where they are not packed yet and `make` is False.
    `rows`: the batch the kernels are tuned for."""
    slots: OrderedDict[str, PackedWeights] = model.__dict__.setdefault(_SLOT, OrderedDict())
    kept = slots.get(adapter)
    if kept is None and not make:  # nothing to look at: skip reading every weight's key
        return None
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not _supported(base):
        return None
    sources = _sources(base)
    if sources is None:
        return None
    params = [
        p for linears in sources for lin in linears for p in (lin.weight, lin.bias) if p is not None
    ]
    key = tuple((p.data_ptr(), p._version) for p in params)
    if kept is not None and kept.key == key:
        slots.move_to_end(adapter)
        return kept
    if not make:
        return None
    slots.pop(adapter, None)  # free the old copy before making the new one
    while len(slots) >= MAX_PACKED:
        slots.popitem(last=False)
    cfg = base.config
    pack = _packer(model.device, sources[0][0].weight.dtype, rows)
    with torch.no_grad():
        layers = tuple(
            _packed_layer(module, linears, pack)
            for module, linears in zip(base.model.layers, sources[:-1], strict=True)
        )
        weights = PackedWeights(
            embed=base.model.embed_tokens,
            rotary=base.model.rotary_emb,
            layers=layers,
            norm=base.model.norm,
            head=pack(*_joined(sources[-1])),
            heads=cfg.num_attention_heads,
            kv_heads=getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads,
            head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
            key=key,
            pinned=tuple(p.data for p in params),
        )
    slots[adapter] = weights
    return weights


def drop_packed(model: Any, adapter: str | None = None) -> None:
    """Free the packed decode weights of `adapter` (None: of every adapter), and the
    static decoder (graphs.py) made over them."""
    drop_slot(model, _SLOT, adapter)
    drop_slot(model, GRAPH_SLOT, adapter)


def drop_sampling_weights(model: Any, adapter: str | None = None) -> None:
    """Free every copy sampling made of `adapter`'s weights (None: of every adapter): its
    merge (merged.py) and its packed decode weights. For when the adapter changes or
    goes away."""
    drop_merged(model, adapter)
    drop_packed(model, adapter)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotated_qkv(
    w: PackedWeights, layer: _Layer, h_BH: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's queries and keys for one token per row, normed (Qwen3's per-head
    norms) and rotated, as `[B, heads + kv_heads, D]`, and its values `[B, kv_heads, D]`."""
    rows, heads, kv_heads = h_BH.shape[0], w.heads, w.kv_heads
    qkv_BND = layer.qkv(layer.input_norm(h_BH)).view(rows, heads + 2 * kv_heads, w.head_dim)
    if layer.qk_norms is not None:
        q_BND, k_BND = qkv_BND[:, :heads], qkv_BND[:, heads : heads + kv_heads]
        q_BND, k_BND = layer.qk_norms[0](q_BND), layer.qk_norms[1](k_BND)
        qk_BND = torch.cat([q_BND, k_BND], dim=1)
    else:
        qk_BND = qkv_BND[:, : heads + kv_heads]
    return qk_BND * cos + _rotate_half(qk_BND) * sin, qkv_BND[:, heads + kv_heads :]


def finish_layer(layer: _Layer, h_BH: torch.Tensor, attended_BHD: torch.Tensor) -> torch.Tensor:
    """The rest of a decoder layer after attention: the output projection and the gated
    MLP, each added to the residual stream."""
    h_BH = h_BH + layer.o(attended_BHD.reshape(h_BH.shape[0], -1))
    gate_BI, up_BI = layer.gate_up(layer.post_norm(h_BH)).chunk(2, dim=-1)
    return h_BH + layer.down(layer.act(gate_BI) * up_BI)


def with_capacity(kv_BKTD: torch.Tensor, capacity: int, dtype: torch.dtype) -> torch.Tensor:
    """A copy of `kv_BKTD` in a buffer of `capacity` positions (the rest uninitialised)."""
    rows, heads, width, dim = kv_BKTD.shape
    buf = kv_BKTD.new_empty((rows, heads, capacity, dim), dtype=dtype)
    buf[:, :, :width] = kv_BKTD
    return buf


class PackedDecoder:
    """Decode with `PackedWeights` over a KV cache preallocated for `room` more tokens."""

    def __init__(self, weights: PackedWeights, pre: Any, room: int) -> None:
        self.w = weights
        keep_BT = pre.mask_BK.bool()
        rows, width = keep_BT.shape
        self.length = width  # columns filled
        capacity = width + room
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        first = pre.cache.layers[0].keys
        # attention.py's matmul path (CPU, half precision) scores with fp32 keys: keep them
        # in fp32 here (exact copies of the rounded keys) rather than convert every step
        self.matmul = first.device.type == "cpu" and first.dtype in (torch.bfloat16, torch.float16)
        key_dtype = torch.float32 if self.matmul else first.dtype
        for layer in pre.cache.layers:
            self.keys.append(with_capacity(layer.keys, capacity, key_dtype))
            self.values.append(with_capacity(layer.values, capacity, layer.values.dtype))
        # True = attend; every decoded column is a real token of its row
        self.keep_BT = torch.ones((rows, capacity), dtype=torch.bool, device=keep_BT.device)
        self.keep_BT[:, :width] = keep_BT
        self.pos_B = pre.next_pos_B

    def select(self, index_B: torch.Tensor) -> None:
        self.keys = [k.index_select(0, index_B) for k in self.keys]
        self.values = [v.index_select(0, index_B) for v in self.values]
        self.keep_BT = self.keep_BT.index_select(0, index_B)
        self.pos_B = self.pos_B.index_select(0, index_B)

    def step(self, ids_B: torch.Tensor) -> torch.Tensor:
        w, n = self.w, self.length
        if n >= self.keys[0].shape[2]:
            raise RuntimeError("the decode cache is full: more steps than the room it was made for")
        rows = ids_B.shape[0]
        heads, kv_heads = w.heads, w.kv_heads
        h_BH = w.embed(ids_B)
        cos, sin = w.rotary(h_BH, self.pos_B.unsqueeze(1))  # [B, 1, dim]
        keep_B11T = self.keep_BT[:, : n + 1].view(rows, 1, 1, n + 1)
        # every layer attends with this mask: stacked by query head once a step
        group = heads // kv_heads
        hidden_B1RT = ~stacked_mask(keep_B11T, rows, group, 1, n + 1) if self.matmul else None
        for i, layer in enumerate(w.layers):
            qk_BND, v_BKD = rotated_qkv(w, layer, h_BH, cos, sin)
            self.keys[i][:, :, n] = qk_BND[:, heads:]
            self.values[i][:, :, n] = v_BKD
            q_BH1D = qk_BND[:, :heads].unsqueeze(2)
            k_BKTD, v_BKTD = self.keys[i][:, :, : n + 1], self.values[i][:, :, : n + 1]
            if self.matmul:
                out_BH = grouped_attention(q_BH1D, k_BKTD, v_BKTD, layer.scaling, hidden_B1RT)
            else:
                out_BH = F.scaled_dot_product_attention(
                    q_BH1D, k_BKTD, v_BKTD, attn_mask=keep_B11T, scale=layer.scaling,
                    enable_gqa=heads != kv_heads,
                )  # fmt: skip
            h_BH = finish_layer(layer, h_BH, out_BH)
        self.length = n + 1
        self.pos_B = self.pos_B + 1
        return w.head(w.norm(h_BH))


def decode_weights(model: Any, pre: Any, room: int, adapter: str) -> PackedWeights | None:
    """The packed weights for decoding the prefilled batch `pre` for `room` tokens, or
    None where the packed step stands aside or would not pay for packing
    (`MIN_ROOM_TO_PACK`). It stands aside for fp32 weights computing under autocast (full
    fine-tuning on CUDA: precision.py), whose products the model's forward casts once per
    sampler call."""
    if not pre.cache.layers or compute_dtype(model) is not None:
        return None
    rows = int(pre.mask_BK.shape[0])
    make = room >= MIN_ROOM_TO_PACK
    return packed_weights(model, adapter, rows=max(rows, 1), make=make)


def packed_decoder(model: Any, pre: Any, room: int, adapter: str) -> PackedDecoder | None:
    """The eager packed step for `pre` (`decode_weights`); the sampler's own choice, CUDA
    graphs on CUDA, is `graphs.step_decoder`."""
    weights = decode_weights(model, pre, room, adapter)
    return PackedDecoder(weights, pre, room) if weights is not None else None
