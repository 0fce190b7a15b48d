"""KV cache layers that decode in place.

transformers' `DynamicLayer` appends each new token's keys and values with `torch.cat`,
which copies the whole cache of every layer at every decode step: for 16 rows of a
~270-token game prompt on the embedded model that is ~100 MB in bf16 (200 MB in fp32)
read and written again per step, as much memory traffic as the weights. `make_room`
swaps a prefilled cache's plain layers for `RoomyLayer`s, which hold their keys and
values in storage with room for the tokens still to come and write each new token into
it; the layer's `keys`/`values` are views of the filled part, so attention reads what it
read before (the same numbers: tested against the plain layers).

Room runs out only if a call decodes more than it reserved; the layer then doubles its
storage (one copy, as `torch.cat` made every step). Dropping rows (`batch_select_indices`,
when a row ends or branches) copies the storage once, as the plain layer copied its keys.
Layers of other kinds (sliding windows, linear attention) are left as they are.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicLayer


class RoomyLayer(DynamicLayer):
    """A full-attention cache layer with preallocated room along the sequence axis."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, room: int) -> None:
        super().__init__()
        self.device = keys.device
        self.length = keys.shape[-2]
        self._keys = self._storage(keys, self.length + room)
        self._values = self._storage(values, self.length + room)
        self.is_initialized = True
        self._views()

    @staticmethod
    def _storage(filled: torch.Tensor, capacity: int) -> torch.Tensor:
        b, h, n, d = filled.shape
        store = torch.empty((b, h, capacity, d), dtype=filled.dtype, device=filled.device)
        store[:, :, :n].copy_(filled)
        return store

    def _views(self) -> None:
        self.keys = self._keys[:, :, : self.length]
        self.values = self._values[:, :, : self.length]

    @property
    def capacity(self) -> int:
        return self._keys.shape[-2]

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        new = key_states.shape[-2]
        if self.length + new > self.capacity:
            grown = max(2 * self.capacity, self.length + new)
            self._keys = self._storage(self.keys, grown)
            self._values = self._storage(self.values, grown)
        end = self.length + new
        self._keys[:, :, self.length : end].copy_(key_states)
        self._values[:, :, self.length : end].copy_(value_states)
        self.length = end
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._keys = self._keys[indices, ...]
        self._values = self._values[indices, ...]
        self._views()

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._keys = self._keys.repeat_interleave(repeats, dim=0)
        self._values = self._values.repeat_interleave(repeats, dim=0)
        self._views()

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative count of tokens, got {tokens_to_remove}")
        self.length = max(0, self.length + tokens_to_remove)
        self._views()

    def reset(self) -> None:
        self.length = 0
        self._views()


def make_room(cache: Any, room: int) -> int:
    """Give every plain full-attention layer of `cache` (filled by a prefill) room for
    `room` more tokens, written in place; returns how many layers changed."""
    changed = 0
    for i, layer in enumerate(cache.layers):
        if type(layer) is DynamicLayer and layer.is_initialized and layer.keys.numel() > 0:
            cache.layers[i] = RoomyLayer(layer.keys, layer.values, room)
            changed += 1
    return changed
