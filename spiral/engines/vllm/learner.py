"""The torch learner sampled by vLLM (`sampler_engine=vllm`): each new version's LoRA
adapter hot-swapped into one running engine (full weights: loaded into a private one),
pool members as adapters beside it (`VllmCopies`, its frozen copies; other weights given
to `load_trained_state`, such as the loop's average, are published for the next sampler);
and a sampler over fixed weights (`engine=vllm`).
The choices are in `engine.py`'s docstring."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path
from typing import Any

from spiral.engines.base import FrozenCopies, Learner, LearnerWrapper, Sampler
from spiral.engines.loading import ModelConfig
from spiral.engines.vllm.engine import VllmEngine, open_engine
from spiral.engines.vllm.sampler import VllmSampler
from spiral.engines.vllm.settings import learner_reserve
from spiral.errors import UsageError

_LEARNERS = itertools.count()


class VllmSampledLearner(LearnerWrapper):
    """A learner whose samplers are vLLM's. LoRA: each new version's adapter is written to
    a folder and hot-swapped into the running engine, pool members likewise; full
    weights: written into a private engine. Every other call goes to the wrapped learner
    (training, checkpoints, averaging)."""

    def __init__(self, learner: Learner, engine: VllmEngine, workdir: Path | None = None) -> None:
        self.inner: Any = learner  # a torch learner (save_weights: its adapter folder)
        self.full = engine.lora_slot == 0  # full weights: synced into a private engine
        if not self.full and not (learner.frozen is not None and learner.frozen.share_model):
            raise UsageError("a LoRA engine samples a LoRA learner; this one trains full weights")
        self.engine = engine
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="spiral-vllm-"))
        self.published = -1
        self.prefix = f"learner-{next(_LEARNERS)}/"  # this learner's adapters in the engine
        self.policy = self.prefix + "policy"

    def forward_backward(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """The inner learner's, with the engine asleep (its GPU memory free) meanwhile."""
        self.engine.sleep()
        if self.full and self.engine.asleep:
            self.published = -1  # level 2 dropped the engine's weights: load them again
        return dict(self.inner.forward_backward(*args, **kwargs))

    def _publish(self) -> None:
        version = self.version
        if self.published == version:
            self.engine.wake()
            return
        if self.full:  # every weight into the running engine
            # the weights where they are (on the GPU: no copy through host memory)
            weights = getattr(self.inner, "live_weights", self.inner.trained_state)
            self.engine.wake(lambda: self.engine.load_weights(weights()))
            self.published = version
            return
        self.engine.wake()
        folder = self.workdir / f"v{version}"
        self.inner.save_weights(folder)
        old = self.workdir / f"v{self.published}"
        self.engine.drop_adapter(self.policy)
        self.engine.add_adapter(self.policy, folder)
        if self.published >= 0:
            shutil.rmtree(old, ignore_errors=True)
        self.published = version

    def sampler(self) -> Sampler:
        self._publish()
        version = self.version
        return VllmSampler(
            self.engine,
            version,
            None if self.full else self.policy,
            is_current=lambda: self.published == version,
            members=self.prefix,
        )

    def load_trained_state(self, state: dict[str, Any], version: int) -> None:
        """Other weights at any version (the loop's average swapped in and out): the
        engine samples them from the next `sampler()` on."""
        self.inner.load_trained_state(state, version)
        self.published = -1

    @property
    def frozen(self) -> FrozenCopies:
        return VllmCopies(self)


class VllmCopies:
    """A vLLM-sampled learner's frozen copies: the torch learner holds them (its KL reads
    the magnet there) and, with LoRA, each copy written to a folder is also an adapter in
    the running engine, which samples it; with full weights the torch learner's own
    copies sample (a weight file per copy, full_members.py)."""

    def __init__(self, learner: VllmSampledLearner) -> None:
        self.learner, self.inner = learner, learner.inner.frozen

    @property
    def share_model(self) -> bool:
        return bool(self.inner.share_model)

    def freeze(self, name: str, folder: Path | None = None) -> None:
        self.inner.freeze(name, folder)
        if folder is not None and not self.learner.full:
            self.learner.engine.add_adapter(self.learner.prefix + name, Path(folder))

    def save(self, name: str, folder: Path) -> None:
        self.inner.save(name, folder)

    def load(self, name: str, folder: Path) -> None:
        self.inner.load(name, folder)
        if not self.learner.full:
            self.learner.engine.add_adapter(self.learner.prefix + name, Path(folder))

    def drop(self, name: str) -> None:
        self.inner.drop(name)
        adapter = self.learner.prefix + name
        if not self.learner.full and self.learner.engine.has_adapter(adapter):
            self.learner.engine.drop_adapter(adapter)

    def names(self) -> list[str]:
        return list(self.inner.names())

    def sampler(self, name: str) -> Sampler:
        if self.learner.full:
            return self.inner.sampler(name)
        adapter, engine = self.learner.prefix + name, self.learner.engine
        return VllmSampler(
            engine,
            -1,
            adapter,
            is_current=lambda: engine.has_adapter(adapter),
            members=self.learner.prefix,
        )


def sampled_by_vllm(learner: Learner, model: ModelConfig, **options: Any) -> Learner:
    """`learner`, its samplers drawn by a new vLLM engine over the same base model."""
    full = model.lora_rank <= 0
    reserve = learner_reserve(learner)
    engine, _ = open_engine(
        model, lora_rank=model.lora_rank, private=full, reserve=reserve, **options
    )
    return VllmSampledLearner(learner, engine)  # type: ignore[return-value,unused-ignore]


def vllm_sampler(model: ModelConfig, version: int) -> Sampler:
    """A sampler over fixed weights (a model folder or a LoRA checkpoint)."""
    engine, adapter = open_engine(model)
    return VllmSampler(engine, version, adapter)
