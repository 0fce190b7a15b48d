"""The one place that builds engines: `engine=NAME` picks a backend for the learner and
for the samplers that serve fixed weights (evaluation opponents, `spiral serve`,
`checkpoint:PATH` agents). Everything else receives engines as arguments.

An engine is an `Engine`: a name and two factories (an engine whose pip extra is missing
says which to install when it is built),

    learner(ModelConfig, **options) -> Learner     training (options: micro_batch_tokens, ...)
    sampler(ModelConfig, version)   -> Sampler     sampling from fixed weights, eval mode
    sample_live(Learner, ModelConfig, **options) -> Learner   (optional) the same learner,
        its samplers drawn by this engine (`sampler_engine=NAME`: vLLM samples what a
        torch learner trains)

`register(Engine(...))` adds one (a new backend is one file plus this call); `learner`,
`sampler` and `names` are what callers use. A name that is not registered is refused
with the list of those that are. Registered here: `torch` (the local transformers +
PEFT engine, CPU and CUDA), `tinker` (the hosted Tinker API through its SDK,
`tinker.py`; needs TINKER_API_KEY) and `vllm` (sampling only, `vllm/engine.py`;
the vllm extra or vLLM's CPU build).

Samplers made by a learner (`Learner.sampler()`, over its live weights) are the engine's
own business and never pass through here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spiral.engines.base import Learner, Sampler
from spiral.engines.loading import ModelConfig
from spiral.errors import UsageError

DEFAULT = "torch"


@dataclass(frozen=True)
class Engine:
    name: str
    learner: Callable[..., Learner]
    sampler: Callable[[ModelConfig, int], Sampler]
    sample_live: Callable[..., Learner] | None = None


_ENGINES: dict[str, Engine] = {}


def register(engine: Engine) -> None:
    """Make `engine` buildable by name (replaces an engine of the same name)."""
    _ENGINES[engine.name] = engine


def unregister(name: str) -> None:
    _ENGINES.pop(name, None)


def names() -> list[str]:
    return sorted(_ENGINES)


def get(name: str) -> Engine:
    if name not in _ENGINES:
        raise UsageError(f"unknown engine {name!r}; registered engines: {', '.join(names())}")
    return _ENGINES[name]


def learner(name: str, model: ModelConfig, **options: Any) -> Learner:
    """A learner of engine `name` over `model` (options go to its factory)."""
    return get(name).learner(model, **options)


def sampler(name: str, model: ModelConfig, version: int = 0) -> Sampler:
    """A sampler of engine `name` over the fixed weights `model` names."""
    return get(name).sampler(model, version)


def sampled_by(name: str, learner: Learner, model: ModelConfig, **options: Any) -> Learner:
    """`learner`, its samplers drawn by engine `name` (refused if that engine cannot)."""
    engine = get(name)
    if engine.sample_live is None:
        raise UsageError(
            f"engine {name!r} cannot sample another engine's learner; sampler engines: "
            f"{', '.join(n for n in names() if get(n).sample_live is not None)}"
        )
    return engine.sample_live(learner, model, **options)


# ---- the local torch engine ----------------------------------------------------------


def _torch_learner(model: ModelConfig, **options: Any) -> Learner:
    from spiral.engines.torch.learner import TorchLearner

    return TorchLearner(model, **options)


def _torch_sampler(model: ModelConfig, version: int) -> Sampler:
    from spiral.engines.torch.loading import load_model_and_tokenizer
    from spiral.engines.torch.sampler import TorchSampler

    loaded, tokenizer = load_model_and_tokenizer(model, trained=False)
    loaded.eval()
    return TorchSampler(loaded, tokenizer, version=version)


register(Engine(DEFAULT, _torch_learner, _torch_sampler))


# ---- the hosted Tinker API (the tinker extra) ----------------------------------------


def _tinker_learner(model: ModelConfig, **options: Any) -> Learner:
    from spiral.engines.tinker import TinkerLearner

    return TinkerLearner(model, **options)


def _tinker_sampler(model: ModelConfig, version: int) -> Sampler:
    from spiral.engines.tinker import tinker_sampler

    return tinker_sampler(model, version)


register(Engine("tinker", _tinker_learner, _tinker_sampler))


# ---- vLLM (the vllm extra): sampling only -------------------------------------------


def _vllm_learner(model: ModelConfig, **options: Any) -> Learner:
    raise UsageError(
        "vLLM samples but does not train: use engine=torch sampler_engine=vllm (the torch "
        "learner trains, vLLM samples its live adapter)"
    )


def _vllm_sampler(model: ModelConfig, version: int) -> Sampler:
    from spiral.engines.vllm.learner import vllm_sampler

    return vllm_sampler(model, version)


def _vllm_live(learner: Learner, model: ModelConfig, **options: Any) -> Learner:
    from spiral.engines.vllm.learner import sampled_by_vllm

    return sampled_by_vllm(learner, model, **options)


register(Engine("vllm", _vllm_learner, _vllm_sampler, _vllm_live))


def known_engine(obj: Any, attr: str) -> None:
    """chz validator for `engine` keys: a registered engine name."""
    get(getattr(obj, attr))


def known_sampler_engine(obj: Any, attr: str) -> None:
    """chz validator for `sampler_engine`: empty (the engine's own) or an engine that can
    sample another's learner."""
    name = getattr(obj, attr)
    if name and get(name).sample_live is None and name != getattr(obj, "engine", None):
        raise UsageError(
            f"sampler_engine={name} cannot sample another engine's learner; sampler engines: "
            f"{', '.join(n for n in names() if get(n).sample_live is not None)}"
        )
