"""Sampler and Learner protocols, mirroring Tinker's primitives.

Every backend (local torch, vLLM, Tinker) fits behind these. A `Sampler` samples, scores
and reports its counters. The `Learner` is narrow: learning (`forward_backward`,
`optim_step`), what sampling needs (`sampler()`, and the weights as data:
`trained_state`, `load_trained_state`), checkpoints (`save`, `load`), model folders of
given weights (`save_weights`, `read_weights`, `export`), `before_main_alone` (what
torchrun ranks do before rank 0 works alone) and `frozen`, the engine's `FrozenCopies`:
named frozen copies of the trained weights it can hold and sample, None where it holds
none (Tinker, FSDP). What is done with those copies and weights is not the engine's:
the weight average (`train/averaging.py`) and the KL's snapshot magnet (`train/magnet.py`)
belong to the loop, the pool's members to the population (`train/population.py`), the
weights' travel to actors to the async collector.

The door: the loop and the commands call only these methods; a wrapper (`LearnerWrapper`:
data-parallel ranks, vLLM's sampling) delegates each of them by name and forwards nothing
else (no `__getattr__`), and nothing under `spiral/train/` names a concrete engine class:
learners come from `registry.learner`, torchrun's wrappers from
`engines.torch.parallel.on_ranks` (`tests/test_engine_door.py` reads the source for both).
A backend may offer more for its own tests and tools (the torch learner's `logprobs`,
`save_trained`, `tokenizer`).

Stale samplers: after an optimiser step the loop asks the learner for a *new* sampler.
A sampler carries the `version` of the weights it samples from and, by one rule
(`check_current`), raises `StaleSamplerError` once those weights have changed: the torch
sampler as soon as its learner steps or loads, vLLM's once a newer adapter has been
published into the engine, a frozen copy's once the copy is dropped. A Tinker sampler is
bound to weights saved on the service, which never change under it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from spiral.algo.regularizers import Regularizer
from spiral.types import AnswerConstraint, Completion, Datum


class SamplingCancelled(Exception):
    """`SamplingParams.cancel` was set while sampling (a client went away, a shutdown)."""


class CancelFlag(Protocol):
    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    # Checked before every decoded token (e.g. a threading.Event): once set, `sample`
    # stops and raises SamplingCancelled, so abandoned work frees the model at once.
    cancel: CancelFlag | None = field(default=None, compare=False, repr=False)


class StaleSamplerError(RuntimeError):
    """A sampler was used after the learner's weights changed."""


def check_current(is_current: Callable[[], bool] | None, version: int) -> None:
    """The one stale-sampler rule every sampler a learner makes keeps: once the learner's
    weights change (an optimizer step, a load), a sampler made before refuses to run."""
    if is_current is not None and not is_current():
        raise StaleSamplerError(
            f"this sampler was made at policy version {version}, but the learner's weights "
            "have changed since (optim_step or load); call learner.sampler() again"
        )


@runtime_checkable
class Sampler(Protocol):
    version: int

    @property
    def tokenizer(self) -> Any: ...

    def sample(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        constraints: Sequence[AnswerConstraint | None] | None = None,
    ) -> list[Completion]:
        """One completion per prompt (token ids in, ids + log-probs + stop reason out)."""
        ...

    def score(
        self,
        prompts: Sequence[Sequence[int]],
        continuations: Sequence[Sequence[int]],
        temperature: float = 1.0,
    ) -> list[list[float]]:
        """Log-probs of each continuation's tokens given its prompt, from
        log_softmax(logits / temperature) (temperature <= 0 means 1)."""
        ...

    def counters(self) -> dict[str, float]:
        """Work done over this sampler's calls as `perf/*` metrics (may be empty)."""
        ...


class AdapterSampler(Sampler, Protocol):
    """A sampler over one model with several LoRA adapters (the trained one and frozen
    pool members), each row drawn with its own (population play in one batch)."""

    def sample(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        constraints: Sequence[AnswerConstraint | None] | None = None,
        adapters: Sequence[str | None] | None = None,
    ) -> list[Completion]:
        """As `Sampler.sample`; `adapters[i]` names prompt i's adapter (None: the trained)."""
        ...


# A loss maps (new_logp_T, sampler_logp_T, advantages_T, mask_T) tensors to
# (scalar loss summed over masked tokens, diagnostics). See spiral/algo/losses.py.
LossFn = Callable[..., tuple[Any, dict[str, float]]]


MAGNET = "magnet"  # the frozen copy the KL term pulls towards (kl_reference=snapshot)
AVERAGED = "averaged"  # the weight average's folder inside a checkpoint's learner/
# an engine=tinker checkpoint's learner/ holds this pointer: the weights stay on the service
HOSTED_POINTER = "tinker_state.json"


@runtime_checkable
class FrozenCopies(Protocol):
    """Named frozen copies of a learner's trained weights: population play's past policies
    and the KL's snapshot magnet. Which copies exist, when they are made and dropped and
    where they are kept on disk is the caller's business (the population, the loop's
    magnet); the engine only holds and samples them."""

    @property
    def share_model(self) -> bool:
        """Whether copies and the policy sample in one batch (`AdapterSampler`: adapters
        of the policy's model); False: one sampler call per copy."""
        ...

    def freeze(self, name: str, folder: Path | None = None) -> None:
        """Copy the current trained weights as `name` (written to `folder` if given)."""
        ...

    def save(self, name: str, folder: Path) -> None:
        """Write copy `name` to `folder`, from which `load` restores it exactly."""
        ...

    def load(self, name: str, folder: Path) -> None: ...

    def drop(self, name: str) -> None:
        """Free copy `name` (its folder is the caller's to remove)."""
        ...

    def names(self) -> list[str]: ...

    def sampler(self, name: str) -> Sampler:
        """A sampler that draws from copy `name`; it refuses to run once it is dropped."""
        ...


@runtime_checkable
class Learner(Protocol):
    version: int
    temperature: float  # the sampling temperature that log-probs are computed at

    def forward_backward(
        self,
        datums: Sequence[Datum],
        loss_fn: LossFn,
        regularizer: Regularizer | None = None,
        normaliser: float | None = None,
    ) -> dict[str, float]:
        """Accumulate gradients of `loss_fn` (plus the optional regulariser) over `datums`,
        each counted `Datum.weight` times, divided by `normaliser` (None: the learner's
        own rule for these datums); return the diagnostics."""
        ...

    def optim_step(self, learning_rate: float) -> dict[str, float]:
        """Apply accumulated gradients (clipped), bump `version`, zero gradients."""
        ...

    def sampler(self) -> Sampler:
        """A sampler bound to the current weights."""
        ...

    def trained_state(self) -> dict[str, Any]:
        """The trained weights by name (LoRA: the adapter only), copied: what actors load,
        what vLLM samples, what the loop's weight average folds in."""
        ...

    def load_trained_state(self, state: dict[str, Any], version: int) -> None:
        """Take a `trained_state()` and its weights `version` (samplers made before are
        stale from now on)."""
        ...

    def save(self, path: Path) -> None:
        """A checkpoint: the trained weights and the optimizer state."""
        ...

    def load(self, path: Path) -> None: ...

    def save_weights(self, folder: Path, state: dict[str, Any] | None = None) -> None:
        """A model folder of `state` (a `trained_state()`; None: the current weights) that
        other tools load, such as the averaged weights beside a checkpoint."""
        ...

    def read_weights(self, folder: Path) -> dict[str, Any]:
        """The weights of a folder `save_weights` wrote, as a `trained_state()`."""
        ...

    def export(self, folder: Path) -> None:
        """A model folder of the current weights that transformers loads on its own (a
        LoRA adapter merged into a copy of the base), with the tokenizer."""
        ...

    def before_main_alone(self, checkpoint: bool = False) -> None:
        """Called on every rank before rank 0 evaluates, or (`checkpoint`) writes a
        checkpoint, without its peers: sharded weights (and the optimizer state for a
        checkpoint) gathered, replicas checked to agree. Nothing to do in one process."""
        ...

    @property
    def frozen(self) -> FrozenCopies | None:
        """Frozen copies of the trained weights this engine can hold and sample (pool
        members, the KL's snapshot magnet); None where it cannot."""
        ...


class LearnerWrapper:
    """A learner that adds one thing to an inner learner (data-parallel ranks, vLLM
    samplers): every `Learner` method it does not redefine is the inner learner's, and
    the attributes the loop sets (`temperature`, `version`) are the inner one's. Nothing
    else reaches through: what a caller needs of a learner is in the protocol."""

    inner: Any

    @property
    def temperature(self) -> float:
        return float(self.inner.temperature)

    @temperature.setter
    def temperature(self, value: float) -> None:
        self.inner.temperature = value

    @property
    def version(self) -> int:
        return int(self.inner.version)

    @version.setter
    def version(self, value: int) -> None:
        self.inner.version = value

    @property
    def tokenizer(self) -> Any:
        return self.inner.tokenizer

    def forward_backward(
        self,
        datums: Sequence[Datum],
        loss_fn: LossFn,
        regularizer: Regularizer | None = None,
        normaliser: float | None = None,
    ) -> dict[str, float]:
        return dict(self.inner.forward_backward(datums, loss_fn, regularizer, normaliser))

    def optim_step(self, learning_rate: float) -> dict[str, float]:
        return dict(self.inner.optim_step(learning_rate))

    def sampler(self) -> Sampler:
        return self.inner.sampler()

    def trained_state(self) -> dict[str, Any]:
        return dict(self.inner.trained_state())

    def load_trained_state(self, state: dict[str, Any], version: int) -> None:
        self.inner.load_trained_state(state, version)

    def save(self, path: Path) -> None:
        self.inner.save(path)

    def load(self, path: Path) -> None:
        self.inner.load(path)

    def save_weights(self, folder: Path, state: dict[str, Any] | None = None) -> None:
        self.inner.save_weights(folder, state)

    def read_weights(self, folder: Path) -> dict[str, Any]:
        return dict(self.inner.read_weights(folder))

    def export(self, folder: Path) -> None:
        self.inner.export(folder)

    def before_main_alone(self, checkpoint: bool = False) -> None:
        self.inner.before_main_alone(checkpoint)

    @property
    def frozen(self) -> FrozenCopies | None:
        return self.inner.frozen
