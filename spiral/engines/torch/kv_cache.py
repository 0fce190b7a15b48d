"""A prefix cache that lives across sampler calls: the KV of prompts already run, kept in
a radix tree over token ids (the idea of SGLang's RadixAttention and vLLM's automatic
prefix caching, written for this sampler's batch layout).

Self-play asks the model about the same game again and again: each turn's prompt repeats
the system prompt, the rules and, with full-history observations (the original's default
`use_llm_obs_wrappers=True`), the whole game so far. Within one call the sampler already
runs a chunk's common prefix once; this cache carries every prompt's keys and values
over to later calls (the next wave of turns), so a game's history is computed once per
game instead of once per turn.

- **Tree**: one root per LoRA adapter (a prefix's KV depends on the adapter). An edge
  holds a run of tokens and their KV as one tensor `[layers, 2, kv_heads, n, head_dim]`
  (keys after rotary embedding, so a cached token keeps the position it was computed at:
  a prefix is only reused at the start of a prompt). `match` walks the tree and returns
  how many leading tokens are cached; `gather` concatenates their KV; `insert` adds the
  KV of a prompt's uncached tail, splitting an edge where prompts part.
- **Budget**: the held KV stays under `budget_bytes`; least recently used leaves go first
  (a leaf's parent becomes a leaf in turn). An edge split copies both halves, so freed
  memory is really freed.
- **Never stale**: a cache belongs to one sampler, and a sampler refuses to run once the
  weights it was made for have changed (`StaleSamplerError`), so KV computed with old
  weights can never be read; the learner makes a new sampler, with an empty cache, after
  every update.
- **Counters** (`hit_tokens`, `lookup_tokens`, `held_bytes`, `evicted_bytes`) feed the
  sampler's `perf/prefix_cache_*` metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass(eq=False)
class _Node:
    tokens: tuple[int, ...]  # the edge from the parent
    kv: torch.Tensor | None  # [layers, 2, kv_heads, len(tokens), head_dim]; None at a root
    parent: _Node | None
    children: dict[int, _Node] = field(default_factory=dict)  # first token -> child
    last_used: int = 0

    @property
    def nbytes(self) -> int:
        return 0 if self.kv is None else self.kv.numel() * self.kv.element_size()


@dataclass(frozen=True)
class Match:
    """The cached part of a prompt: its length and the edges that hold it (the last one
    possibly only in part)."""

    length: int
    path: tuple[_Node, ...]


class PrefixCache:
    """KV of token prefixes, per adapter, under a memory budget (module docstring)."""

    def __init__(self, budget_bytes: int) -> None:
        if budget_bytes < 0:
            raise ValueError(f"budget_bytes must be >= 0, got {budget_bytes}")
        self.budget_bytes = budget_bytes
        self._roots: dict[str, _Node] = {}
        self._clock = 0
        self.held_bytes = 0
        self.evicted_bytes = 0
        self.hit_tokens = 0
        self.lookup_tokens = 0

    def match(
        self, adapter: str, tokens: Sequence[int], limit: int | None = None, count: bool = True
    ) -> Match:
        """The longest cached prefix of `tokens[:limit]` (`count`: as a lookup, in the
        hit-rate counters)."""
        tokens = tuple(tokens[:limit] if limit is not None else tokens)
        found = self._walk(adapter, tokens)
        if count:
            self.lookup_tokens += len(tokens)
            self.hit_tokens += found.length
        return found

    def gather(self, found: Match) -> torch.Tensor:
        """The KV of a match, `[layers, 2, kv_heads, found.length, head_dim]`."""
        parts, left = [], found.length
        for node in found.path:
            assert node.kv is not None
            take = min(left, len(node.tokens))
            parts.append(node.kv[:, :, :, :take])
            left -= take
        return torch.cat(parts, dim=3)

    def insert(self, adapter: str, tokens: Sequence[int], kv: torch.Tensor, start: int) -> None:
        """Cache `tokens`, given the KV of `tokens[start:]` (`[layers, 2, heads, n, dim]`);
        `tokens[:start]` must be cached already (else nothing is inserted: it was evicted)."""
        tokens = tuple(tokens)
        if self.budget_bytes == 0 or len(tokens) <= start:
            return
        found = self._walk(adapter, tokens)
        if found.length < start or found.length == len(tokens):
            return
        node = self._split(found) if found.path else self._root(adapter)
        tail = kv[:, :, :, found.length - start :].contiguous()
        child = _Node(tokens[found.length :], tail, node, last_used=self._tick())
        node.children[child.tokens[0]] = child
        self.held_bytes += child.nbytes
        self._evict()

    def clear(self) -> None:
        self._roots.clear()
        self.held_bytes = 0

    # ---- the tree ---------------------------------------------------------------------
    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _root(self, adapter: str) -> _Node:
        if adapter not in self._roots:
            self._roots[adapter] = _Node((), None, None)
        return self._roots[adapter]

    def _walk(self, adapter: str, tokens: tuple[int, ...]) -> Match:
        node, depth, path = self._roots.get(adapter), 0, []
        now = self._tick()
        while node is not None and depth < len(tokens):
            child = node.children.get(tokens[depth])
            if child is None:
                break
            n = 0
            edge = child.tokens
            while n < len(edge) and depth + n < len(tokens) and edge[n] == tokens[depth + n]:
                n += 1
            child.last_used = now
            path.append(child)
            depth += n
            if n < len(edge):
                break
            node = child
        return Match(depth, tuple(path))

    def _split(self, found: Match) -> _Node:
        """The node at which `found` ends, splitting its last edge if it ends inside it."""
        last = found.path[-1]
        inside = found.length - sum(len(n.tokens) for n in found.path[:-1])
        if inside == len(last.tokens):
            return last
        assert last.kv is not None and last.parent is not None
        head = _Node(
            last.tokens[:inside],
            last.kv[:, :, :, :inside].clone(),
            last.parent,
            last_used=last.last_used,
        )
        before = last.nbytes
        last.kv = last.kv[:, :, :, inside:].clone()
        last.tokens = last.tokens[inside:]
        last.parent.children[head.tokens[0]] = head
        head.children[last.tokens[0]] = last
        last.parent = head
        self.held_bytes += head.nbytes + last.nbytes - before
        return head

    def _evict(self) -> None:
        while self.held_bytes > self.budget_bytes:
            leaves = [n for n in self._nodes() if not n.children and n.kv is not None]
            if not leaves:
                return
            victim = min(leaves, key=lambda n: n.last_used)
            assert victim.parent is not None
            del victim.parent.children[victim.tokens[0]]
            self.held_bytes -= victim.nbytes
            self.evicted_bytes += victim.nbytes

    def _nodes(self) -> list[_Node]:
        out, todo = [], list(self._roots.values())
        while todo:
            node = todo.pop()
            out.append(node)
            todo.extend(node.children.values())
        return out
