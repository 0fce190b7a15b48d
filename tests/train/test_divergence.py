"""A diverging run ends with a clear message instead of hanging or training on garbage:
NaN/inf gradients skip the update (reported) and stop the run after `max_bad_steps`;
NaN weights stop sampling with NonFiniteLogitsError."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from spiral.engines.base import Learner
from spiral.engines.torch.draws import NonFiniteLogitsError
from spiral.report.sinks import read_jsonl
from spiral.train.loop import TrainingDivergedError
from spiral.train.setup import make_learner_factory

from .test_e2e import tiny_model  # noqa: F401  (fixture)
from .test_stop_and_resume import _cfg, _train


def test_nan_gradients_are_skipped_then_the_run_stops(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    cfg = _cfg(tiny_model, tmp_path / "run", 6, "max_bad_steps=2", "eval_every=0")
    build = make_learner_factory(cfg)
    snapshots: list[dict[str, torch.Tensor]] = []

    def factory() -> Learner:
        learner = build()
        real = learner.forward_backward

        def poisoned(*args, **kwargs):  # type: ignore[no-untyped-def]
            out = real(*args, **kwargs)
            params = list(learner.model.named_parameters())  # type: ignore[attr-defined]
            snapshots.append({n: p.detach().clone() for n, p in params if p.requires_grad})
            for _, p in params:
                if p.grad is not None:
                    p.grad.fill_(float("nan"))
            return out

        learner.forward_backward = poisoned  # type: ignore[method-assign]
        return learner

    with pytest.raises(TrainingDivergedError, match="2 consecutive steps"):
        _train(cfg, factory)
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["train/skipped_nonfinite"] for r in rows] == [1.0, 1.0]
    # The skipped updates left the weights as they were.
    assert all(torch.equal(snapshots[0][n], snapshots[1][n]) for n in snapshots[0])


def test_absurd_learning_rate_ends_with_a_message_not_a_hang(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    cfg = _cfg(tiny_model, tmp_path / "run", 4, "learning_rate=1e30", "answer_format=constrained")
    with pytest.raises(NonFiniteLogitsError, match="learning_rate"):
        _train(cfg)
