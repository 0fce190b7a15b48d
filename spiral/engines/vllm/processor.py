"""The vLLM logits processor that gives vLLM's sampler Spiral's constrained answers.

`AnswerConstraintProcessor` is registered with the engine by class; each request says
what it needs in `SamplingParams.extra_args` as plain data:

- `CONSTRAINT_KEY`: the row's answer constraint (`constraint_args`); `_RowMask` replays
  the request's output ids through the same `ConstrainedRow` as the torch sampler (free
  thinking, the forced marker, the trie of legal choices, a forced end-of-sequence) and
  says which tokens it allows.
- `SCORE_KEY`: a continuation to score by teacher forcing; `_ScoreForce` records each
  target's tempered log-prob in `SCORES` under the request's key, then forces it.

The processor works on the whole batch (vLLM's `LogitsProcessor` interface, which its
model runner requires): a boolean mask row per batch slot lives on the device and is
rewritten only where a row's allowed tokens changed, with one index write for every
changed row, and the batch's logits are masked in one operation. Per step the host work is
each constrained row's state machine (a few tokens), not a tensor per row.

The processor is built on first use, so importing this module does not import vLLM.
"""

from __future__ import annotations

import itertools
from typing import Any

from spiral.engines.torch.constrained import ConstrainedRow
from spiral.types import AnswerConstraint

CONSTRAINT_KEY = "spiral_constraint"  # SamplingParams.extra_args key of a row's constraint
SCORE_KEY = "spiral_score"  # ... of a teacher-forced continuation to score
SCORES: dict[str, dict[int, float]] = {}  # scoring key -> {position: log-prob}
_SCORE_IDS = itertools.count()


def next_score_key() -> str:
    """A fresh key under which one scoring request's log-probs are recorded."""
    return f"score-{next(_SCORE_IDS)}"


def constraint_args(c: AnswerConstraint, eos_ids: frozenset[int], max_tokens: int) -> dict:
    """A row's constraint as plain data for `SamplingParams.extra_args`."""
    return {
        "choices": [list(choice) for choice in c.choices],
        "marker": list(c.marker),
        "think_budget": c.think_budget,
        "think_limit": min(c.think_budget, max_tokens),
        "eos": sorted(eos_ids),
    }


def constrained_row(args: dict) -> ConstrainedRow:
    constraint = AnswerConstraint(
        choices=tuple(tuple(c) for c in args["choices"]),
        marker=tuple(args["marker"]),
        think_budget=args["think_budget"],
    )
    return ConstrainedRow(constraint, frozenset(args["eos"]), args["think_limit"])


class _RowMask:
    """One request's constraint: replays its output ids (vLLM's live list, which grows as
    it decodes) through a `ConstrainedRow`; `allowed` is what it may emit next (None:
    anything)."""

    def __init__(self, args: dict, output_ids: list[int]) -> None:
        self.row = constrained_row(args)
        self.output_ids = output_ids
        self.seen = 0
        self.end = min(args["eos"])

    def allowed(self) -> tuple[int, ...] | None:
        for token in self.output_ids[self.seen :]:
            if not self.row.done:
                self.row.push(int(token))
        self.seen = len(self.output_ids)
        forced = self.row.forced_token()
        if self.row.done:
            return (self.end,)
        if forced is not None:
            return (forced,)
        allowed = self.row.allowed()
        return None if allowed is None else tuple(sorted(allowed))


class _ScoreForce:
    """One scoring request: at each step the tempered log-prob of the next target is
    recorded (`record`), then only that target is allowed."""

    def __init__(self, args: dict, output_ids: list[int]) -> None:
        self.targets: list[int] = args["targets"]
        self.temperature: float = args["temperature"]
        self.sink = SCORES.setdefault(args["key"], {})
        self.output_ids = output_ids

    def target(self) -> int | None:
        k = len(self.output_ids)
        return self.targets[k] if k < len(self.targets) else None

    def allowed(self) -> tuple[int, ...] | None:
        target = self.target()
        return None if target is None else (target,)


def _new_row(params: Any, output_ids: list[int]) -> _RowMask | _ScoreForce | None:
    extra = params.extra_args or {}
    if SCORE_KEY in extra:
        return _ScoreForce(extra[SCORE_KEY], output_ids)
    return _RowMask(extra[CONSTRAINT_KEY], output_ids) if CONSTRAINT_KEY in extra else None


def _processor_class() -> type:
    import torch
    from vllm.v1.sample.logits_processor import LogitsProcessor
    from vllm.v1.sample.logits_processor.builtin import process_dict_updates

    class AnswerConstraintProcessor(LogitsProcessor):  # type: ignore[misc,unused-ignore]
        """Batch-level: one boolean mask row per batch slot, kept on the device and
        rewritten only where a row's allowed tokens changed (one index write for all of
        them), applied to the whole batch in one operation; scoring rows' log-probs read
        in one gather and one transfer."""

        def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
            self.device = device
            self.rows: dict[int, _RowMask | _ScoreForce] = {}
            self.keep: torch.Tensor | None = None  # [slots, vocab]: True = may emit
            self.written: dict[int, tuple[int, ...] | None] = {}  # what each mask row holds

        def is_argmax_invariant(self) -> bool:
            return False

        def update_state(self, batch_update: Any) -> None:
            if batch_update is None:
                return
            process_dict_updates(
                self.rows, batch_update, lambda params, _prompt, out: _new_row(params, out)
            )
            # Slots were added, removed or moved: every mask row is rewritten at the next
            # apply (one write), rather than tracking each move.
            if self.keep is not None and self.written:
                self.keep.fill_(True)
            self.written.clear()

        def apply(self, logits: torch.Tensor) -> torch.Tensor:
            if not self.rows:
                return logits
            slots, vocab = logits.shape
            if self.keep is None or self.keep.shape[0] < slots or self.keep.shape[1] != vocab:
                self.keep = torch.ones(
                    (max(slots, 256), vocab), dtype=torch.bool, device=logits.device
                )
                self.written.clear()
            self._score(logits)
            self._write_masks()
            return logits.masked_fill_(~self.keep[:slots], float("-inf"))

        def _score(self, logits: torch.Tensor) -> None:
            """Record each scoring row's tempered log-prob of its next target."""
            scoring = [
                (slot, row, target)
                for slot, row in self.rows.items()
                if isinstance(row, _ScoreForce) and (target := row.target()) is not None
            ]
            if not scoring:
                return
            index = torch.tensor([s for s, _, _ in scoring], device=logits.device)
            temps = torch.tensor([r.temperature for _, r, _ in scoring], device=logits.device)
            targets = torch.tensor([t for _, _, t in scoring], device=logits.device)
            logp = torch.log_softmax(logits[index].float() / temps.unsqueeze(1), dim=-1)
            values = logp.gather(1, targets.unsqueeze(1)).squeeze(1).tolist()
            for (_, row, _), value in zip(scoring, values, strict=True):
                row.sink[len(row.output_ids)] = float(value)

        def _write_masks(self) -> None:
            """Rewrite the mask rows whose allowed tokens changed since last written."""
            assert self.keep is not None
            changed = []
            for slot, row in self.rows.items():
                want = row.allowed()
                if slot not in self.written or self.written[slot] != want:
                    changed.append((slot, want))
                    self.written[slot] = want
            if not changed:
                return
            device = self.keep.device
            self.keep[torch.tensor([s for s, _ in changed], device=device)] = True
            limited = [(s, a) for s, a in changed if a is not None]
            if limited:
                rows = torch.tensor([s for s, _ in limited], device=device)
                self.keep[rows] = False
                flat_rows = [s for s, a in limited for _ in a]
                flat_cols = [t for _, a in limited for t in a]
                where = torch.tensor([flat_rows, flat_cols], device=device)
                self.keep[where[0], where[1]] = True

    AnswerConstraintProcessor.__module__ = __name__
    AnswerConstraintProcessor.__qualname__ = "AnswerConstraintProcessor"
    return AnswerConstraintProcessor


_PROCESSOR: list[type] = []


def processor() -> type:
    """The logits processor class (built once: vLLM is imported only when used)."""
    if not _PROCESSOR:
        _PROCESSOR.append(_processor_class())
    return _PROCESSOR[0]
