"""How the learner cuts a batch into micro-batches and which positions of each it
computes: pure functions of the datums, no model.

- `micro_batches`: rows packed so that each micro-batch's forward stays within a token
  budget, either as a padded (or packed) batch sorted by length, or, with prefix sharing,
  as a two-level tree (the common prefix once, each distinct prompt once, then every
  row's trained tail).
- `plan_positions`: per micro-batch, the (row, column) of every position that needs a
  log-prob, with its target, its allowed tokens and its weight.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from spiral.engines.torch.constrained import answer_masks
from spiral.engines.torch.prefill import common_prefix_len
from spiral.types import Datum


@dataclass
class Plan:
    """The (row, column) of every position that needs a log-prob in one micro-batch,
    with its target, its allowed tokens (constrained answers), its legal-move shares
    (for the uniform magnet) and its weight (mask x row weight)."""

    datums: list[int] = field(default_factory=list)  # which datum of the micro-batch
    rows: list[int] = field(default_factory=list)  # row and column in the hidden states
    cols: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    targets: list[int] = field(default_factory=list)
    allowed: list[tuple[int, ...] | None] = field(default_factory=list)
    shares: list[dict[int, int] | None] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)


Locate = Callable[[int, int], tuple[int, int]]  # (row b, position t) -> index in the hidden


def first_needed(datum: Datum) -> int:
    """The first target position forward_backward trains (mask > 0); the sequence before
    it can be shared. Always < len(input_ids), so every row keeps a tail."""
    first = next((t for t, m in enumerate(datum.mask) if m > 0), len(datum.input_ids) - 1)
    return min(first, len(datum.input_ids) - 1)


@dataclass(frozen=True)
class _Chunk:
    """A micro-batch being packed: its rows and what its tree forward costs."""

    rows: list[int]
    last: tuple[int, ...]  # input ids of the last row (sorted order)
    shared: int  # common prefix length (capped by every row's first trained token)
    stems: frozenset[tuple[int, ...]]  # distinct prompts (ids before the first trained token)
    stem_end: int  # longest stem end
    tail: int  # longest tail

    @property
    def cost(self) -> int:
        return (
            self.shared
            + len(self.stems) * (self.stem_end - self.shared)
            + len(self.rows) * self.tail
        )

    @classmethod
    def of(cls, index: int, datum: Datum) -> _Chunk:
        end = first_needed(datum)
        ids = datum.input_ids
        return cls([index], ids, end, frozenset({ids[:end]}), end, len(ids) - end)

    def plus(self, index: int, datum: Datum) -> _Chunk:
        ids, end = datum.input_ids, first_needed(datum)
        shared = min(self.shared, common_prefix_len([self.last, ids]), end)
        return _Chunk(
            [*self.rows, index],
            ids,
            shared,
            self.stems | {ids[:end]},
            max(self.stem_end, end),
            max(self.tail, len(ids) - end),
        )


def pack_plain(
    datums: Sequence[Datum], order: list[int], budget: int, packed: bool = False
) -> list[list[int]]:
    """Rows in `order`, cut so that rows x padded length (`packed`: the rows' summed
    length) stays within `budget`."""
    chunks: list[list[int]] = []
    current: list[int] = []
    width = 0
    used = 0
    for i in order:
        new_width = max(width, len(datums[i].input_ids))
        cost = used + len(datums[i].input_ids) if packed else (len(current) + 1) * new_width
        if current and cost > budget:
            chunks.append(current)
            current, new_width = [], len(datums[i].input_ids)
            used = 0
        current.append(i)
        width = new_width
        used += len(datums[i].input_ids)
    if current:
        chunks.append(current)
    return chunks


def micro_batches(
    datums: Sequence[Datum], budget: int, share_prefix: bool, packed: bool = False
) -> list[list[int]]:
    """Pack datums into micro-batches whose cost stays <= `budget` tokens.

    Without prefix sharing, rows are sorted by length and cost rows x padded length.
    With it, rows are sorted by their token ids, so rows that share a prefix (the rules
    text of a game, a game's earlier turns) sit together, and a chunk runs as a
    two-level tree (`prefill_grouped`): the chunk's common prefix once, each distinct
    prompt ("stem": everything before the first trained token) once, then every row's
    few trained tokens. A chunk costs prefix + stems x longest stem + rows x longest
    tail. A row joins the current chunk only if that costs less than starting a new
    one, so rows sharing a long prefix (one Kuhn seat and betting history) are not
    diluted by rows that share only the start (the other seat's)."""
    if not share_prefix:
        order = sorted(range(len(datums)), key=lambda i: len(datums[i].input_ids))
        return pack_plain(datums, order, budget, packed)
    order = sorted(range(len(datums)), key=lambda i: tuple(datums[i].input_ids))
    chunks: list[list[int]] = []
    current: _Chunk | None = None
    for i in order:
        if current is not None:
            grown = current.plus(i, datums[i])
            if grown.cost <= budget and grown.cost <= current.cost + len(datums[i].input_ids):
                current = grown
                continue
            chunks.append(current.rows)
        current = _Chunk.of(i, datums[i])
    if current is not None:
        chunks.append(current.rows)
    return chunks


def plan_positions(batch: Sequence[Datum], every_target: bool, locate: Locate) -> Plan:
    """Which (row, position) pairs need a log-prob: every target, or only trained ones
    (mask > 0; forced and single-option tokens are masked out by `assemble`), and where
    each one's hidden state is (`locate`, from `_hidden`)."""
    plan = Plan()
    for b, d in enumerate(batch):
        forced: set[int] = set()
        answer: dict[int, tuple[int, ...]] = {}
        if d.constraint is not None and d.constraint_start is not None:
            marker_pos, masks = answer_masks(d.constraint, d.target_ids, d.constraint_start)
            forced, answer = set(marker_pos), dict(masks)
        for t, token in enumerate(d.target_ids):
            if t in forced or not (every_target or d.mask[t] > 0):
                continue
            row, col = locate(b, t)
            plan.datums.append(b)
            plan.rows.append(row)
            plan.cols.append(col)
            plan.positions.append(t)
            plan.targets.append(int(token))
            plan.allowed.append(answer.get(t))
            plan.weights.append(d.mask[t] * d.weight)
            shares = None
            if t in answer and d.constraint is not None and d.constraint_start is not None:
                shares = d.constraint.next_tokens(d.target_ids[d.constraint_start : t])
            plan.shares.append(shares)
    return plan
