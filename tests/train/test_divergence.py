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


@pytest.mark.parametrize("rollout", ["sampled", "full_width"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_model_whose_weights_hold_nan_is_refused_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rollout: str, value: float
) -> None:
    """NaN (or inf) already in the starting weights is the model's fault, not the
    learning rate's: the run refuses in one line naming the tensor, before any step (it
    once said "lower learning_rate", or raised a traceback with rollout=full_width)."""
    from safetensors.torch import load_file, save_file

    from spiral.cli import main as cli_main
    from spiral.testing import make_tiny_model

    model = make_tiny_model(tmp_path / "model")
    weights = load_file(str(model / "model.safetensors"))
    name = "model.layers.1.mlp.up_proj.weight"
    weights[name].view(-1)[7] = value
    save_file(weights, str(model / "model.safetensors"), metadata={"format": "pt"})
    capsys.readouterr()  # the maker's progress bar
    run = tmp_path / "run"
    argv = [
        "train", f"model_name={model}", "env_ids=KuhnPokerSingle-v0", "batch_size=4",
        "max_steps=2", "max_tokens=4", "lora_rank=4", "eval_every=0", "template=chat",
        "answer_format=constrained", f"rollout={rollout}", f"log_path={run}",
    ]  # fmt: skip
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"model_name={model} hold NaN or inf" in err and f"({name})" in err
    assert "learning_rate" not in err
    assert not (run / "metrics.jsonl").exists() and not (run / "checkpoints").exists()
