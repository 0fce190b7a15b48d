"""The vLLM logits processor that gives vLLM's sampler Spiral's constrained answers.

`AnswerConstraintProcessor` is registered with the engine by class; each request says
what it needs in `SamplingParams.extra_args` as plain data:

- `CONSTRAINT_KEY`: the row's answer constraint (`constraint_args`); `_RowMask` replays
  the request's output ids through the same `ConstrainedRow` as the torch sampler (free
  thinking, the forced marker, the trie of legal choices, a forced end-of-sequence) and
  masks the logits to what it allows.
- `SCORE_KEY`: a continuation to score by teacher forcing; `_ScoreForce` records each
  target's tempered log-prob in `SCORES` under the request's key, then forces it.

The processor is built on first use, so importing this module does not import vLLM.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
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
    """One request's mask: replays its output ids through a `ConstrainedRow`."""

    def __init__(self, args: dict) -> None:
        self.row = constrained_row(args)
        self.seen = 0
        self.end = min(args["eos"])

    def __call__(self, output_ids: list[int], logits: Any) -> Any:
        import torch

        for token in output_ids[self.seen :]:
            if not self.row.done:
                self.row.push(int(token))
        self.seen = len(output_ids)
        forced = self.row.forced_token()
        if self.row.done:
            allowed: Sequence[int] | None = (self.end,)
        elif forced is not None:
            allowed = (forced,)
        else:
            allowed = self.row.allowed()
        if allowed is None:
            return logits
        masked = torch.full_like(logits, float("-inf"))
        index = torch.tensor(list(allowed), device=logits.device)
        masked[index] = logits[index]
        return masked


class _ScoreForce:
    """One scoring request: at each step record the tempered log-prob of the next target,
    then force it."""

    def __init__(self, args: dict) -> None:
        self.targets: list[int] = args["targets"]
        self.temperature: float = args["temperature"]
        self.sink = SCORES.setdefault(args["key"], {})

    def __call__(self, output_ids: list[int], logits: Any) -> Any:
        import torch

        k = len(output_ids)
        if k >= len(self.targets):
            return logits
        target = self.targets[k]
        logp = torch.log_softmax(logits.float() / self.temperature, dim=-1)[target]
        self.sink[k] = float(logp)
        forced = torch.full_like(logits, float("-inf"))
        forced[target] = 0.0
        return forced


def _processor_class() -> type:
    from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

    class AnswerConstraintProcessor(AdapterLogitsProcessor):  # type: ignore[misc,unused-ignore]
        """Rows whose extra_args carry a constraint get the legal-answer mask."""

        def is_argmax_invariant(self) -> bool:
            return False

        def new_req_logits_processor(self, params: Any) -> Any:
            extra = params.extra_args or {}
            if SCORE_KEY in extra:
                return _ScoreForce(extra[SCORE_KEY])
            return _RowMask(extra[CONSTRAINT_KEY]) if CONSTRAINT_KEY in extra else None

    AnswerConstraintProcessor.__module__ = __name__
    AnswerConstraintProcessor.__qualname__ = "AnswerConstraintProcessor"
    return AnswerConstraintProcessor


_PROCESSOR: list[type] = []


def processor() -> type:
    """The logits processor class (built once: vLLM is imported only when used)."""
    if not _PROCESSOR:
        _PROCESSOR.append(_processor_class())
    return _PROCESSOR[0]
