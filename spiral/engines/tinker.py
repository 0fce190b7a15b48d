"""engine=tinker: the Learner and Sampler protocols over the official `tinker` SDK (the
hosted Tinker API), with the original Tinker port's datum layout and loss names.

    forward_backward(datums, loss)  -> TrainingClient.forward_backward(data, "ppo" | ...)
    optim_step(lr)                  -> TrainingClient.optim_step(AdamParams(lr, 0.9, 0.95, 1e-8))
    sampler()                       -> save_weights_for_sampler + a SamplingClient
    save(path) / load(path)         -> save_state / a new training client from that state
                                       with its optimizer (a pointer file in the checkpoint
                                       folder: the weights stay on the service)

Choices:
- **The datum** is the original's (docs/original.md, "Losses"): `model_input` = prompt +
  completion without its last token, `target_tokens` shifted by one, `logprobs` the
  sampler's, `advantages` zero on prompt positions (the mask). Ours multiplies the
  advantage by mask x weight / normaliser: Tinker sums the loss over tokens and rows, so
  this gives the torch engine's gradient (normalised by the batch's rows, a merged row
  counted `weight` times; both losses are linear in the advantage's scale).
- **Losses** go by name (`importance_sampling`, `ppo`; Tinker clips PPO at 0.2, so another
  `ppo_clip` is refused). The loss is computed by the service; the diagnostics
  (ratio_mean, clip_frac, approx_kl, ...) are ours, computed from the log-probs the
  service returns for the targets.
- **Not on Tinker** (refused with the reason, never silently dropped): full fine-tuning
  (the service trains LoRA adapters), constrained answers (the service samples without
  our logit masks), entropy/KL regularisers, weight averaging, snapshots for population
  play, the async loop's weight transfer, and `export` (the weights stay on the service).
- Contract tests use the SDK's own types and a stand-in service.
- `TINKER_API_KEY` must be set; without it building the engine stops with that message.
  Every service call blocks on its future (`.result()`), so errors surface where they
  happen; the SDK's client constructors return futures too (tinker >= 0.38) and are awaited
  the same way, never used as clients.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from spiral.algo.losses import loss_name
from spiral.algo.regularizers import Regularizer
from spiral.engines.base import HOSTED_POINTER, LossFn, Sampler, SamplingParams
from spiral.engines.loading import ModelConfig
from spiral.engines.tinker_checks import (
    aligned,
    model_id,
    offered,
    probe_row,
    probe_tokens,
    reachable,
    same_weights,
    without_sequence_ids,
)
from spiral.errors import SpiralError
from spiral.types import AnswerConstraint, Completion, Datum, StopReason

API_KEY_ENV = "TINKER_API_KEY"
POINTER_FILE = HOSTED_POINTER
PPO_CLIP = 0.2  # fixed by the service
TINKER_LOSSES = ("importance_sampling", "ppo")  # ours that the service computes by name
ADAM = {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8}


class TinkerUnsupported(SpiralError, ValueError):
    """A feature the hosted engine does not offer (use engine=torch for it)."""


def _tinker() -> Any:
    try:
        import tinker
    except ImportError as err:
        raise SpiralError(
            "engine=tinker needs the Tinker SDK: pip install 'spiral-selfplay[tinker]'"
        ) from err
    return tinker


def service_client() -> Any:
    """The SDK's ServiceClient, or a clear stop when no API key is set."""
    if not os.environ.get(API_KEY_ENV):
        raise SpiralError(
            f"engine=tinker needs {API_KEY_ENV} set to your Tinker API key (the hosted "
            "service trains and samples); or train locally with engine=torch"
        )
    reachable()
    return _tinker().ServiceClient()


@contextlib.contextmanager
def starting() -> Iterator[None]:
    """The SDK's refusals while an engine starts (a key it rejects, a model the service does
    not offer) as one line, before any work."""
    tinker = _tinker()
    try:
        yield
    except tinker.TinkerError as err:
        raise SpiralError(f"engine=tinker could not start: {err}; check {API_KEY_ENV}") from None


# ---- our nouns <-> the SDK's types ----------------------------------------------------


def to_tinker_datum(datum: Datum, scale: float = 1.0) -> Any:
    """One training row in Tinker's layout (see the module docstring)."""
    import numpy as np

    types = _tinker().types
    adv = [a * m * datum.weight * scale for a, m in zip(datum.advantages, datum.mask, strict=True)]
    return types.Datum(
        model_input=types.ModelInput.from_ints(list(datum.input_ids)),
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_numpy(np.asarray(datum.target_ids, np.int64)),
            "logprobs": types.TensorData.from_numpy(np.asarray(datum.sampler_logprobs, np.float32)),
            "advantages": types.TensorData.from_numpy(np.asarray(adv, np.float32)),
        },
    )


def to_tinker_sampling(params: SamplingParams) -> Any:
    return _tinker().types.SamplingParams(
        max_tokens=params.max_tokens,
        temperature=params.temperature,
        top_p=params.top_p,
        stop=list(params.stop) or None,
        seed=None if params.seed is None else params.seed % 2**31,  # servers on JAX take int32
    )


def from_tinker_sequence(sequence: Any, tokenizer: Any) -> Completion:
    tokens = tuple(int(t) for t in sequence.tokens)
    logprobs = tuple(float(x) for x in (sequence.logprobs or [0.0] * len(tokens)))
    eos = tokenizer.eos_token_id
    reason: StopReason = "length" if sequence.stop_reason == "length" else "stop"
    if tokens and tokens[-1] == eos:
        reason = "eos"
    text = tokenizer.decode(list(tokens), skip_special_tokens=True)
    return Completion(tokens=tokens, logprobs=logprobs, stop_reason=reason, text=text)


# ---- the sampler ---------------------------------------------------------------------


class TinkerSampler:
    """Sampling from a Tinker SamplingClient (weights fixed at its creation)."""

    def __init__(self, client: Any, tokenizer: Any, version: int = 0) -> None:
        self.client = client
        self._tokenizer = tokenizer
        self.version = version

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def sample(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        constraints: Sequence[AnswerConstraint | None] | None = None,
    ) -> list[Completion]:
        if constraints is not None and any(c is not None for c in constraints):
            raise TinkerUnsupported(
                "constrained answers need the torch engine (Tinker samples without our "
                "logit masks); use answer_format=boxed or bracket with engine=tinker"
            )
        types = _tinker().types
        sampling = to_tinker_sampling(params)
        futures = [
            self.client.sample(types.ModelInput.from_ints(list(p)), 1, sampling) for p in prompts
        ]
        try:
            done = [f.result() for f in futures]
        except AssertionError as err:
            raise (without_sequence_ids(err) or err) from None
        return [from_tinker_sequence(d.sequences[0], self.tokenizer) for d in done]

    def score(
        self,
        prompts: Sequence[Sequence[int]],
        continuations: Sequence[Sequence[int]],
        temperature: float = 1.0,
    ) -> list[list[float]]:
        if temperature > 0 and temperature != 1.0:
            raise TinkerUnsupported("Tinker scores at temperature 1 only: set temperature=1")
        types = _tinker().types
        out = []
        for prompt, cont in zip(prompts, continuations, strict=True):
            whole = types.ModelInput.from_ints([*prompt, *cont])
            logprobs = aligned(
                self.client.compute_logprobs(whole).result(), len(prompt) + len(cont)
            )
            out.append([float(x or 0.0) for x in logprobs[len(prompt) :]])  # None: position 0
        return out

    def counters(self) -> dict[str, float]:
        return {}


# ---- the learner ---------------------------------------------------------------------


class TinkerLearner:
    """LoRA training on the hosted service; the Learner protocol (spiral.engines.base)."""

    def __init__(
        self,
        cfg: ModelConfig,
        service: Any = None,
        max_grad_norm: float = 1.0,
        **_local_options: Any,  # micro-batching, prefix cache: the service's business
    ) -> None:
        if cfg.lora_rank <= 0:
            raise TinkerUnsupported("Tinker trains LoRA adapters; set lora_rank > 0")
        self.cfg = cfg
        with starting():
            self.service = service if service is not None else service_client()
            self.model = model_id(cfg.model)
            offered(self.model)
            self.client = self.service.create_lora_training_client(
                base_model=self.model, rank=cfg.lora_rank, seed=cfg.seed
            ).result()
            self.tokenizer = self.client.get_tokenizer()
        self.max_grad_norm = max_grad_norm
        self._said_unclipped = False
        self.version = 0
        self.temperature = 1.0

    def forward_backward(
        self,
        datums: Sequence[Datum],
        loss_fn: LossFn,
        regularizer: Regularizer | None = None,
        normaliser: float | None = None,
    ) -> dict[str, float]:
        if not datums:
            raise ValueError("forward_backward got no datums")
        if regularizer is not None and regularizer.active:
            raise TinkerUnsupported(
                "entropy, KL and move-floor regularisers need engine=torch (set entropy_coef=0 "
                "kl_coef=0 move_floor=0 move_floor_coef=0)"
            )
        name = loss_name(loss_fn)
        if name not in TINKER_LOSSES:
            raise TinkerUnsupported(
                f"Tinker computes {', '.join(TINKER_LOSSES)} (not {name}); use engine=torch"
            )
        clip = getattr(loss_fn, "keywords", {}).get("clip", PPO_CLIP)
        if name == "ppo" and clip != PPO_CLIP:
            raise TinkerUnsupported(f"Tinker clips PPO at {PPO_CLIP}; set ppo_clip={PPO_CLIP}")
        if normaliser is None:
            normaliser = sum(d.weight for d in datums)
        data = [to_tinker_datum(d, 1.0 / normaliser) for d in datums]
        output = self.client.forward_backward(data, name).result()
        return self._diagnostics(datums, output, loss_fn)

    def _diagnostics(
        self, datums: Sequence[Datum], output: Any, loss_fn: LossFn
    ) -> dict[str, float]:
        """Our loss's diagnostics over the target log-probs the service returned."""
        new = torch.tensor([x for out in output.loss_fn_outputs for x in out["logprobs"].tolist()])

        def flat(field: str) -> torch.Tensor:
            return torch.tensor([v for d in datums for v in getattr(d, field)], dtype=torch.float32)

        weight = torch.tensor([d.weight for d in datums for _ in d.mask], dtype=torch.float32)
        mask = flat("mask") * weight
        ours, diagnostics = loss_fn(new, flat("sampler_logprobs"), flat("advantages"), mask)
        metrics = {k: float(v) for k, v in diagnostics.items()}
        # the service's loss where it reports one (the hosted service does); else ours,
        # from the same log-probs (a self-hosted server may report none)
        metrics["loss"] = float(output.metrics.get("loss:sum", ours))
        metrics["num_tokens"] = float(mask.sum())
        return metrics

    def optim_step(self, learning_rate: float) -> dict[str, float]:
        params = _tinker().types.AdamParams(
            learning_rate=learning_rate, grad_clip_norm=self.max_grad_norm, **ADAM
        )
        output = self.client.optim_step(params).result()
        self.version += 1
        metrics = {k: float(v) for k, v in (getattr(output, "metrics", None) or {}).items()}
        self._notice_unclipped(metrics)
        return {**metrics, "lr": learning_rate, "skipped_nonfinite": 0.0}

    def _notice_unclipped(self, metrics: dict[str, float]) -> None:
        """Say once when the service reports a gradient norm above the clip it was sent: a
        server that ignores `grad_clip_norm` (SkyRL's 0.4.0 does) steps unclipped."""
        norms = [v for k, v in metrics.items() if k.endswith("grad_norm")]
        if norms and max(norms) > self.max_grad_norm and not self._said_unclipped:
            self._said_unclipped = True
            print(
                f"engine=tinker: the service reports a gradient norm of {max(norms):.3g} "
                f"against max_grad_norm={self.max_grad_norm}; a server that does not clip "
                "steps with the whole gradient (lower learning_rate if training diverges)",
                file=sys.stderr,
            )

    def logprobs(self, datums: Sequence[Datum]) -> list[list[float]]:
        data = [to_tinker_datum(d) for d in datums]
        output = self.client.forward(data, "cross_entropy").result()
        return [out["logprobs"].tolist() for out in output.loss_fn_outputs]

    def sampler(self) -> Sampler:
        client = self.client.save_weights_and_get_sampling_client().result()
        return TinkerSampler(client, self.tokenizer, self.version)

    def save(self, path: Path) -> None:
        """The state stays on the service; the folder holds where (and the tokenizer)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        saved = self.client.save_state(name=f"state-{self.version:06d}").result()
        weights = self.client.save_weights_for_sampler(name=f"sampler-{self.version:06d}").result()
        probe = probe_tokens(self.tokenizer)
        pointer = {
            "path": saved.path,  # weights and optimizer: what a resume reads
            "sampler_path": weights.path,  # weights for a SamplingClient: what eval reads
            "version": self.version,
            "base_model": self.cfg.model,
            # the saved weights' log-probs of a fixed row: a resume must give them again
            "probe": {"tokens": probe, "logprobs": self.logprobs([probe_row(probe)])[0]},
        }
        (path / POINTER_FILE).write_text(json.dumps(pointer, indent=2), encoding="utf-8")
        self.tokenizer.save_pretrained(str(path))

    def load(self, path: Path) -> None:
        """A new training client from the saved state, optimizer included (the SDK's way to
        resume: a client does not load a state into itself)."""
        pointer = json.loads((Path(path) / POINTER_FILE).read_text(encoding="utf-8"))
        tinker = _tinker()
        try:
            self.client = self.service.create_training_client_from_state_with_optimizer(
                pointer["path"]
            ).result()
        except (tinker.BadRequestError, tinker.UnprocessableEntityError) as err:
            self.client = self._load_into_fresh_client(pointer["path"], err)
        if "probe" in pointer:
            row = probe_row(pointer["probe"]["tokens"])
            same_weights(pointer["probe"]["logprobs"], self.logprobs([row])[0], str(path))
        self.version = int(pointer["version"])

    def _load_into_fresh_client(self, state: str, refused: Exception) -> Any:
        """A server without the current resume call (SkyRL's 0.4.0 wants the model to load
        into): a fresh client whose first request loads the state, the SDK's older way."""
        print(
            f"engine=tinker: the service cannot start a client from a saved state "
            f"({type(refused).__name__}); loading it into a fresh client instead",
            file=sys.stderr,
        )
        client = self.service.create_lora_training_client(
            base_model=self.model, rank=self.cfg.lora_rank, seed=self.cfg.seed
        ).result()
        said = logging.getLogger("tinker.lib.public_interfaces.training_client")
        level = said.level
        with warnings.catch_warnings():  # deprecated in the SDK (said above), served here
            warnings.simplefilter("ignore", FutureWarning)
            said.setLevel(logging.CRITICAL)
            try:
                client.load_state_with_optimizer(state).result()
            finally:
                said.setLevel(level)
        return client

    # ----- what the hosted engine does not offer ------------------------------------
    def _unsupported(self, what: str) -> TinkerUnsupported:
        return TinkerUnsupported(f"{what} is not built for engine=tinker; use engine=torch")

    def trained_state(self) -> dict[str, Any]:
        raise self._unsupported("the async actor-learner")

    def load_trained_state(self, state: dict[str, Any], version: int) -> None:
        raise self._unsupported("the async actor-learner")

    def save_weights(self, folder: Path, state: dict[str, Any] | None = None) -> None:
        raise self._unsupported("weight averaging (weight_ema_decay)")

    def read_weights(self, folder: Path) -> dict[str, Any]:
        raise self._unsupported("weight averaging (weight_ema_decay)")

    def export(self, folder: Path) -> None:
        raise self._unsupported("export (the weights stay on the service)")

    def before_main_alone(self, checkpoint: bool = False) -> None:
        """One process: nothing to gather."""

    # Frozen copies (population play, the snapshot magnet) live in a local model only.
    frozen = None


def sampler_path(folder: Path) -> str:
    """The sampler weights a checkpoint folder's pointer names (a state path is for
    resuming; a SamplingClient reads sampler weights)."""
    pointer = json.loads((folder / POINTER_FILE).read_text(encoding="utf-8"))
    if not pointer.get("sampler_path"):
        raise SpiralError(
            f"{folder / POINTER_FILE} names no sampler weights (saved by an older Spiral): "
            "resume the run for one step with engine=tinker to save them"
        )
    return str(pointer["sampler_path"])


def tinker_sampler(cfg: ModelConfig, version: int = 0) -> Sampler:
    """A sampler over a base model, a saved `tinker://` path, or a checkpoint folder of an
    engine=tinker run (its pointer file) (eval, serve, agents)."""
    model = cfg.model
    if (Path(model) / POINTER_FILE).is_file():
        model = sampler_path(Path(model))
    with starting():
        service = service_client()
        if model.startswith("tinker://"):
            client = service.create_sampling_client(model_path=model).result()
        else:
            model = model_id(model)
            offered(model)
            client = service.create_sampling_client(base_model=model).result()
        return TinkerSampler(client, client.get_tokenizer(), version)
