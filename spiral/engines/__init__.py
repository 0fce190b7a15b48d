"""engines layer: on what hardware? The Sampler / Learner protocols and their backends.

What every backend shares sits here: the protocols (`base.py`), the one place engines are
built by name (`registry.py`), what an engine knows of a model before it loads it
(`loading.py`: the `ModelConfig`, where the weights are, device and dtype; `hub.py`: a
hub id with or without network; `embedded.py`: the embedded default model) and export
folders that prove they are whole (`model_folder.py`). Each backend has its own room:
`torch/` (the local engine; `torch/parallel/` its learners over torchrun ranks), `vllm/`
(sampling beside a torch learner, or of fixed weights) and `tinker.py` (the hosted
service). Checkpoint manifests sit below the engines, in `spiral/checkpoints/`, since the
engines, the agents and the training loop all verify through them. A new engine is one
module or package here and one `register` call in `registry.py`.

Importing `spiral.engines` stays light: the protocols and ModelConfig come without torch;
the torch classes load on first attribute access (PEP 562 module `__getattr__`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from spiral.engines.base import Learner, LossFn, Sampler, SamplingParams, StaleSamplerError
from spiral.engines.loading import ModelConfig, resolve_model_path

if TYPE_CHECKING:
    from spiral.engines.embedded import ensure_embedded_model
    from spiral.engines.torch.constrained import TokenTrie
    from spiral.engines.torch.learner import TorchLearner
    from spiral.engines.torch.loading import load_model_and_tokenizer
    from spiral.engines.torch.sampler import TorchSampler

_LAZY = {
    "TorchSampler": "spiral.engines.torch.sampler",
    "TorchLearner": "spiral.engines.torch.learner",
    "TokenTrie": "spiral.engines.torch.constrained",
    "load_model_and_tokenizer": "spiral.engines.torch.loading",
    "ensure_embedded_model": "spiral.engines.embedded",
}

__all__ = [
    "Learner",
    "LossFn",
    "ModelConfig",
    "Sampler",
    "SamplingParams",
    "StaleSamplerError",
    "TokenTrie",
    "TorchLearner",
    "TorchSampler",
    "ensure_embedded_model",
    "load_model_and_tokenizer",
    "resolve_model_path",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'spiral.engines' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
