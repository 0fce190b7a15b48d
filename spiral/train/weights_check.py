"""The starting weights, checked before a run trains on them.

NaN or inf already in a model's weights (a damaged model folder, a bad conversion) makes
every loss and gradient non-finite from the first step: the run would skip update after
update and stop with "lower learning_rate", or stop at its first sampled move with the
same advice, or (`rollout=full_width`) with a traceback. None of that is the learning
rate's doing, so the run refuses at the start, in one line that names the tensors. The
learning-rate hint stays for NaN that arises during training (`loop._count_bad_steps`).

The check reads the weights of an engine that holds them here (the torch learner, also
under data-parallel or vLLM wrappers: `inner`); one held elsewhere (`engine=tinker`) is
left to its service. Each tensor is summed in float32 on its device (no copy of the
weights) and the sums come back in one transfer; a sum that is not finite is confirmed
element by element, so finite weights whose sum overflows are not refused.
"""

from __future__ import annotations

from typing import Any

from spiral.engines.torch.finite import non_finite_parameters
from spiral.errors import SpiralError


class NonFiniteWeightsError(SpiralError, FloatingPointError):
    """The model's weights hold NaN or inf before any training."""


def _module(learner: Any) -> Any:
    """The torch model a learner (or the learner it wraps) holds, or None."""
    while learner is not None:
        model = getattr(learner, "model", None)
        if model is not None and hasattr(model, "named_parameters"):
            return model
        learner = getattr(learner, "inner", None)
    return None


def non_finite_tensors(learner: Any) -> list[str]:
    """The names of the learner's parameters that hold NaN or inf (none for an engine
    that keeps its weights elsewhere)."""
    return [_file_name(name) for name, _, _ in non_finite_parameters(_module(learner))]


def _file_name(name: str) -> str:
    """A parameter's name as the model's weights file has it (LoRA's wrapping removed)."""
    return name.removeprefix("base_model.model.").replace(".base_layer.", ".")


def check_finite_weights(learner: Any, model_name: str) -> None:
    """Refuse, in one line, a model whose weights hold NaN or inf before training."""
    bad = non_finite_tensors(learner)
    if bad:
        more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
        raise NonFiniteWeightsError(
            f"the weights of model_name={model_name} hold NaN or inf as loaded, before "
            f"training ({bad[0]}{more}): the model files are damaged, not the run; copy, "
            "convert or download the model again, or use another model"
        )
