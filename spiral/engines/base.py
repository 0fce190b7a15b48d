"""Sampler and Learner protocols, mirroring Tinker's primitives.

Every backend (local torch, vLLM, Tinker) fits behind these. After an optimiser step the
loop asks the learner for a *new* sampler, so stale weights cannot be used by accident:
a sampler carries the `version` of the weights it samples from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
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

    def logprobs(self, datums: Sequence[Datum]) -> list[list[float]]:
        """Current log-probs of each datum's targets (constraint applied), no grad."""
        ...

    def sampler(self) -> Sampler:
        """A sampler bound to the current weights."""
        ...

    def trained_state(self) -> dict[str, Any]:
        """The trained weights by name (LoRA: the adapter only), for actors to load."""
        ...

    def load_trained_state(self, state: dict[str, Any], version: int) -> None:
        """Take another learner's `trained_state()` and its weights `version`."""
        ...

    def save(self, path: Path) -> None: ...

    def load(self, path: Path) -> None: ...

    @property
    def has_average(self) -> bool:
        """True when the learner keeps an average of its weights (and has one yet)."""
        ...

    def averaged(self) -> AbstractContextManager[None]:
        """A block in which the model (and samplers made inside it) hold the averaged
        weights; the live weights come back on exit."""
        ...

    # Population play: frozen past policies the current one plays against.
    def take_snapshot(self, name: str, folder: Path) -> None:
        """Freeze the current weights as pool member `name`, also written to `folder`."""
        ...

    def load_snapshot(self, name: str, folder: Path) -> None:
        """Restore pool member `name` from `folder` (resume)."""
        ...

    def drop_snapshot(self, name: str) -> None:
        """Free pool member `name` (its folder is the caller's to remove)."""
        ...

    def snapshot_sampler(self, name: str) -> Sampler:
        """A sampler that draws from pool member `name`."""
        ...

    @property
    def members_share_model(self) -> bool:
        """Whether pool members and the policy sample in one batch (`AdapterSampler`:
        members are adapters of the policy's model); False: one call per member."""
        ...

    def refresh_magnet(self) -> None:
        """kl_reference="snapshot": the KL now pulls towards a frozen copy of the current
        weights (saved in checkpoints)."""
        ...


class LearnerWrapper:
    """A learner that adds one thing to an inner learner (data-parallel ranks, vLLM
    samplers): whatever it does not define is the inner learner's, and the attributes
    the loop sets (`temperature`, `version`) are set on the inner one."""

    inner: Any

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not yet set: no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.inner, name)

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
