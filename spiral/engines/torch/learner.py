"""TorchLearner: forward_backward / optim_step / save / load on a transformers (+PEFT) model.

Mirrors Tinker's training primitives (docs/original.md, "Losses and the learner"): datums in
the shifted layout, a loss function over per-token tensors, gradients accumulated across
calls until `optim_step`, AdamW with betas (0.9, 0.95) and eps 1e-8, no schedule inside the
learner.

Choices:
- Log-probs, entropies and the KL's magnet at the trained positions: `log_probs.py`.
- Micro-batching: datums are packed so that each micro-batch's cost stays within
  `micro_batch_tokens` (0: sized to the GPU's free memory, `memory.py`); memory is
  bounded for any batch size.
- Shared prefixes (`share_prefix=True`, the default): datums are sorted by their token
  ids so that rows sharing a prompt prefix (a game's rules text, its earlier turns) sit
  together; each micro-batch runs its common prefix once (batch 1) and its rows continue
  from that KV cache. The gradient flows through the shared cache, so the result equals
  the per-row computation (tested); the saving is the prefix times (rows - 1). Measured
  ~3.5x faster training steps on single-hand Kuhn poker (docs/results.md). On an H100 at
  16 rows it ran twice the kernels for 0.92x of the unshared speed (the step was bound
  by kernel launches): `share_prefix=False` (the constructor's flag; a run always shares).
- The loss returned by `loss_fn` is a SUM over tokens; each micro-batch's sum is divided
  by the normaliser (`normalize="datums"`: the summed `weight` of the datums in the
  forward_backward call, i.e. the number of sampled rows they stand for; "none": 1,
  Tinker's plain sum), so the accumulated gradient does not depend on micro-batching or
  on merging identical rows (`spiral.algo.merge`). A row's per-token weight is
  mask x `Datum.weight`; losses, regularisers and diagnostics all use it.
- An optional `Regularizer` (entropy bonus, KL to a magnet) is added to the loss at the
  same positions from the full next-token distributions already computed there
  (`spiral.algo.regularizers`); the KL to the reference model runs the base model (the
  LoRA adapter disabled, or a frozen copy for full fine-tuning) on the same rows without
  gradients. The policy's entropy at the trained positions is reported either way.
- `temperature` is the run's sampling temperature (the loop sets it); it is saved with a
  checkpoint for the record but NOT restored by `load`, so a resumed run that changes
  `temperature=` scores at the temperature it now samples at.
- `optim_step` clips the gradient norm (`max_grad_norm`); a step whose norm is not finite
  is skipped, weights unchanged, and counted (`skipped_nonfinite`; the loop stops a run
  after `max_bad_steps` of them in a row).
- Gradient checkpointing runs every row whole: transformers drops the KV cache in a
  checkpointed training forward, and shared prefixes continue rows from that cache.
- `trained=False` builds a copy that only samples (what an async actor holds): full
  fine-tuning's weights in the compute dtype instead of fp32 masters, no optimizer or KL
  reference; training calls are refused.
- Staleness: every weight change (optim_step, load) bumps an internal epoch; a sampler
  made earlier raises StaleSamplerError instead of sampling from changed weights.
- Checkpoints are HF folders (PEFT adapter or full model, plus tokenizer) and the
  optimizer state in safetensors + JSON (checkpoint_io). No pickle.
- Weights as data: `trained_state` / `load_trained_state` (what actors, vLLM and the
  loop's weight average move around), `save_weights` (a loadable model folder of given
  weights) and `read_weights` (a folder's weights as a `trained_state`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch

import spiral.engines.torch.checkpoint_io as checkpoint_io
import spiral.engines.torch.snapshots as snapshots
from spiral.algo.losses import combine_diagnostics
from spiral.algo.regularizers import Regularizer, regularizer_from_terms
from spiral.checkpoints.manifest import DamagedCheckpointError, damaged_if_unreadable
from spiral.engines.base import LossFn
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.batching import micro_batches
from spiral.engines.torch.decode import drop_sampling_weights
from spiral.engines.torch.frozen import TorchFrozenCopies
from spiral.engines.torch.full_members import FullMembers
from spiral.engines.torch.loading import load_model_and_tokenizer
from spiral.engines.torch.log_probs import Forward, LogProbs
from spiral.engines.torch.magnet_memo import MagnetMemo
from spiral.engines.torch.memory import (
    CPU_TOKENS,
    MAX_TOKENS,
    auto_micro_batch_tokens,
    smaller_after_oom,
)
from spiral.engines.torch.sampler import TorchSampler
from spiral.engines.torch.sampler_rows import eval_mode
from spiral.errors import LearnerOutOfMemory
from spiral.types import Datum


class TorchLearner(LogProbs):
    """Learner over a local transformers model (LoRA via PEFT or full fine-tuning)."""

    def __init__(
        self,
        cfg: ModelConfig,
        micro_batch_tokens: int = 0,
        max_grad_norm: float = 1.0,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        normalize: Literal["datums", "none"] = "datums",
        sampler_batch_tokens: int = 32768,
        share_prefix: bool = True,
        max_loaded_members: int = 2,
        prefix_cache_mb: float = 0.0,
        merge_lora: bool = True,
        packed_decode: bool = True,
        trained: bool = True,
    ) -> None:
        """`trained=False`: a copy that only samples (an async actor): full fine-tuning's
        weights load in the compute dtype instead of fp32 masters (half the memory in
        bf16), and `forward_backward`/`optim_step` refuse; `load_trained_state` fills it."""
        if normalize not in ("datums", "none"):
            raise ValueError(f"normalize must be 'datums' or 'none', got {normalize!r}")
        self.cfg = cfg
        self.trained = trained
        self.model, self.tokenizer = load_model_and_tokenizer(cfg, trained=trained)
        # 0: sized to the device's free memory at each learning step (memory.py; 4096 on
        # a CPU); `micro_batch_tokens` then holds the size last used
        self.sized_micro_batches = micro_batch_tokens == 0
        self._micro_batch_tokens = micro_batch_tokens or CPU_TOKENS
        self._oom_cap = MAX_TOKENS  # sized budgets stay under it once a step ran out of memory
        self.max_grad_norm = max_grad_norm
        self.betas, self.eps, self.weight_decay = betas, eps, weight_decay
        self.normalize = normalize
        self.sampler_batch_tokens = sampler_batch_tokens
        # A checkpointed layer drops the KV cache in a training forward (transformers), so
        # the shared-prefix forward, which continues rows from the prefix's cache, cannot
        # run under gradient checkpointing: every row is then computed whole.
        self.share_prefix = share_prefix and not cfg.gradient_checkpointing
        # Rows that run whole (no prefix sharing) packed into one sequence without padding
        # (`prefill.packed_hidden`): exact, but under sdpa's block mask attention runs over
        # the whole packed sequence, 0.56-0.65x the padded batch on this project's CPU
        # (`benchmarks/pack_ab.py`), so it is off until a varlen kernel pays for it.
        self.pack_rows = False
        self.prefix_reuse = share_prefix  # the samplers' (checkpointing is the learner's)
        self.merge_lora = merge_lora  # samplers compute with the adapter merged in (merged.py)
        self.packed_decode = packed_decode  # samplers decode with decode.py's step
        self.share_identical = True  # samplers prefill identical prompts once (benchmarks: off)
        self.prefix_cache_mb = prefix_cache_mb  # each sampler's KV cache across calls
        # Pool members' kept answer distributions (sampler.py), dropped with the member.
        self.frozen_answers: dict[str, dict[Any, Any]] = {}
        # Full fine-tuning's pool members: weight files, a bounded few held (full_members.py).
        self.full_members = FullMembers(self.model, self.tokenizer, max_loaded_members)
        self.version = 0
        self.temperature = 1.0
        self._epoch = 0  # bumped on every weight change; samplers check it
        self._optimizer: torch.optim.Optimizer | None = None
        self._reference: Any = None  # frozen base model for full fine-tuning's KL
        self.frozen = TorchFrozenCopies(self)  # pool members, the KL's snapshot magnet
        # The magnet's distributions at constrained answers, kept while it stays the same
        # (magnet_memo.py); an exact shortcut, so off with prefix sharing (checkpointing,
        # share_prefix=False; benchmarks turn it off with `keep_magnet`).
        self._magnet_memo = MagnetMemo()
        self.keep_magnet = True

    # ----- parameters and optimizer -------------------------------------------------
    def _refuse_if_sampling_only(self, what: str) -> None:
        if not self.trained:
            raise RuntimeError(
                f"{what}: this copy of the model only samples (built with trained=False, "
                "as an async actor's is); train with the run's learner"
            )

    def _named_trainable(self) -> list[tuple[str, torch.nn.Parameter]]:
        return [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]

    def _get_optimizer(self) -> torch.optim.Optimizer:
        if self._optimizer is None:
            params = [p for _, p in self._named_trainable()]
            if not params:
                raise RuntimeError("the model has no trainable parameters")
            self._optimizer = torch.optim.AdamW(
                params, lr=0.0, betas=self.betas, eps=self.eps, weight_decay=self.weight_decay
            )
        return self._optimizer

    # ----- micro-batches --------------------------------------------------------------
    @property
    def micro_batch_tokens(self) -> int:
        """Tokens per micro-batch: the size last used where it is sized to the memory."""
        return self._micro_batch_tokens

    @micro_batch_tokens.setter
    def micro_batch_tokens(self, tokens: int) -> None:
        """A fixed size from now on (no longer sized to the memory)."""
        self._micro_batch_tokens, self.sized_micro_batches = tokens, False

    def _micro_batches(self, datums: Sequence[Datum], share_prefix: bool) -> list[list[int]]:
        """The datums' indices in micro-batches of at most micro_batch_tokens (batching.py),
        sized to the free memory now where asked (memory.py)."""
        if self.sized_micro_batches:
            made = self._optimizer is not None and bool(self._optimizer.state)
            self._micro_batch_tokens = min(
                self._oom_cap,
                auto_micro_batch_tokens(
                    self.model, self.cfg.gradient_checkpointing, optimizer_made=made
                ),
            )
        return micro_batches(datums, self.micro_batch_tokens, share_prefix, self.pack_rows)

    def logprobs(self, datums: Sequence[Datum]) -> list[list[float]]:
        """Current log-probs of every target (constraint applied), without gradients."""
        result: list[list[float]] = [[] for _ in datums]
        with eval_mode(self.model):
            for chunk in self._micro_batches(datums, share_prefix=False):
                fwd = self._batch_forward([datums[i] for i in chunk], every_target=True)
                for i, v in zip(chunk, fwd.per_datum, strict=True):
                    result[i] = v.tolist()
        return result

    # ----- training -------------------------------------------------------------------
    def forward_backward(
        self,
        datums: Sequence[Datum],
        loss_fn: LossFn,
        regularizer: Regularizer | None = None,
        normaliser: float | None = None,
    ) -> dict[str, float]:
        """Accumulate the gradient of (sum of loss_fn + regulariser over micro-batches) /
        normaliser; every row counts `weight` times (mask x weight per token). A caller
        that splits one batch over several calls (the async loop: one call per staleness,
        for its ratio statistics) passes the whole batch's `normaliser`."""
        if not datums:
            raise ValueError("forward_backward got no datums")
        self._refuse_if_sampling_only("forward_backward")
        reg = regularizer or Regularizer()
        # The samplers' merge of the trained adapter (merged.py) and their packed decode
        # weights (decode.py) are stale after this step's update anyway: free them before
        # the activations peak.
        drop_sampling_weights(self.model, snapshots.TRAINED)
        if (
            reg.kl_coef > 0
            and reg.kl_reference == "reference"
            and not checkpoint_io.is_peft(self.model)
        ):
            self._reference_model()  # made before the micro-batches are sized
        if normaliser is None:
            normaliser = sum(d.weight for d in datums) if self.normalize == "datums" else 1.0
        self.model.train()
        # Out of GPU memory with sized micro-batches: the whole call again with halves,
        # where no gradient from an earlier call would be lost by clearing them.
        fresh = all(p.grad is None for _, p in self._named_trainable())
        while True:
            failure = ""
            try:
                return combine_diagnostics(self._accumulate(datums, loss_fn, reg, normaliser))
            except torch.OutOfMemoryError as err:
                failure = str(err).split(". ")[0]
            # outside the handler, so the failed step's tensors are already released
            tokens = self.micro_batch_tokens
            smaller = smaller_after_oom(tokens) if self.sized_micro_batches else None
            if smaller is None or not fresh:
                raise LearnerOutOfMemory(
                    f"{failure} in a learning step with micro-batches of {tokens} tokens: "
                    f"set micro_batch_tokens={max(tokens // 2, 1)} or lower"
                )
            self.model.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            warnings.warn(
                f"out of GPU memory with micro-batches of {tokens} tokens: the step runs "
                f"again with {smaller}, the cap from now on",
                stacklevel=2,
            )
            self._oom_cap = smaller

    def _accumulate(
        self, datums: Sequence[Datum], loss_fn: LossFn, reg: Regularizer, normaliser: float
    ) -> list[dict[str, float]]:
        """`forward_backward`'s micro-batches: their gradients accumulated, their
        diagnostics returned."""
        parts: list[dict[str, float]] = []
        for chunk in self._micro_batches(datums, share_prefix=self.share_prefix):
            batch = [datums[i] for i in chunk]
            fwd = self._batch_forward(batch, every_target=False, reg=reg)
            new_T = torch.cat(fwd.per_datum)
            device = new_T.device

            def flat(field: str, batch: list[Datum] = batch, device: Any = device) -> torch.Tensor:
                values = [v for d in batch for v in getattr(d, field)]
                return torch.tensor(values, dtype=torch.float32, device=device)

            weight_T = torch.tensor(
                [d.weight for d in batch for _ in d.mask], dtype=torch.float32, device=device
            )
            mask_T = flat("mask") * weight_T
            loss, diagnostics = loss_fn(new_T, flat("sampler_logprobs"), flat("advantages"), mask_T)
            reg_loss, reg_diag = self._regularize(fwd, reg)
            diagnostics = {**diagnostics, **reg_diag}
            if reg.active:
                loss = loss + reg_loss
            if loss.requires_grad:  # False only when no position is masked in
                (loss / normaliser).backward()
            tokens = float(mask_T.sum())
            # A micro-batch with no trained token has no ratios to report (its
            # placeholders must not become the step's extremes).
            shown = {k: float(v) for k, v in diagnostics.items()} if tokens > 0 else {}
            parts.append({**shown, "loss": float(loss.detach()) / normaliser, "num_tokens": tokens})
        # A non-finite loss leaves non-finite gradients: optim_step then skips the update.
        # combine_diagnostics: token-weighted means; ratio_min / ratio_max their extremes.
        return parts

    def _regularize(self, fwd: Forward, reg: Regularizer) -> tuple[torch.Tensor, dict[str, float]]:
        """The regulariser's summed loss over the trained positions (see
        spiral.algo.regularizers); its entropy diagnostic is reported even when off."""
        device = fwd.terms.values_N.device
        if not fwd.plan.rows:
            return torch.zeros((), device=device), {}
        weight_N = torch.tensor(fwd.plan.weights, dtype=torch.float32, device=device)
        loss, diagnostics = regularizer_from_terms(
            fwd.terms.entropy_N, fwd.terms.kl_N, weight_N, reg, fwd.terms.floor_N
        )
        return loss, {
            **diagnostics,
            "reg_loss": float(loss.detach()) / max(float(weight_N.sum()), 1e-12),
        }

    def optim_step(self, learning_rate: float) -> dict[str, float]:
        """Clip, AdamW step at `learning_rate`, zero grads, bump the version; a non-finite
        gradient norm skips the step (`skipped_nonfinite` = 1, weights unchanged)."""
        self._refuse_if_sampling_only("optim_step")
        optimizer = self._get_optimizer()
        params = [p for _, p in self._named_trainable()]
        limit = self.max_grad_norm if self.max_grad_norm > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, limit))
        if not math.isfinite(grad_norm):
            # NaN/inf in the loss or gradients: skip the update (the weights and Adam's
            # moments stay as they were); the loop counts skipped steps and stops a run
            # that keeps producing them.
            optimizer.zero_grad(set_to_none=True)
            return {"grad_norm": grad_norm, "lr": learning_rate, "skipped_nonfinite": 1.0}
        for group in optimizer.param_groups:
            group["lr"] = learning_rate
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        self.version += 1
        self._epoch += 1
        return {"grad_norm": grad_norm, "lr": learning_rate, "skipped_nonfinite": 0.0}

    # ----- weights that travel (the async actor-learner) ------------------------------
    def trained_state(self) -> dict[str, torch.Tensor]:
        """The trained weights (the LoRA adapter, or every weight with full fine-tuning)
        as CPU tensors by parameter name: what an actor needs to sample like this learner."""
        return {n: p.detach().to("cpu", copy=True) for n, p in self._named_trainable()}

    def live_weights(self) -> dict[str, torch.Tensor]:
        """The trained weights themselves by parameter name, on the learner's device and
        not copied: for a sampler in this process that copies them at once (vLLM's weight
        load on the same GPU, without a round trip through host memory)."""
        return {n: p.detach() for n, p in self._named_trainable()}

    def load_trained_state(self, state: dict[str, torch.Tensor], version: int) -> None:
        """Copy `trained_state()` of another learner over the same model into this one and
        take its `version` (samplers made before are stale from now on)."""
        params = dict(self._named_trainable())
        missing, unexpected = params.keys() - state.keys(), state.keys() - params.keys()
        if missing or unexpected:
            raise ValueError(
                f"weights do not fit this model: missing {sorted(missing)[:3]}, unexpected "
                f"{sorted(unexpected)[:3]} (built with another lora_rank or model?)"
            )
        with torch.no_grad():
            for name, param in params.items():
                param.copy_(state[name].to(param.device, param.dtype))
        self.version = version
        self._epoch += 1

    def sampler(self) -> TorchSampler:
        """A sampler sharing this model; it refuses to run after the weights change."""
        epoch = self._epoch
        return TorchSampler(
            self.model,
            self.tokenizer,
            version=self.version,
            max_batch_tokens=self.sampler_batch_tokens,
            is_current=lambda: self._epoch == epoch,
            share_identical=self.share_identical,
            frozen=self.frozen_answers,
            prefix_cache_mb=self.prefix_cache_mb,
            prefix_reuse=self.prefix_reuse,
            merge_lora=self.merge_lora,
            packed_decode=self.packed_decode,
        )

    # ----- checkpoints ----------------------------------------------------------------
    def save(self, path: Path) -> None:
        """HF model folder (adapter or full) + tokenizer + optimizer state, no pickle."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.save_trained(path)
        self.tokenizer.save_pretrained(str(path))
        names = [n for n, _ in self._named_trainable()]
        extra = {"version": self.version, "temperature": self.temperature}
        checkpoint_io.save_optimizer(self._get_optimizer(), names, path, extra)

    def save_weights(self, folder: Path, state: dict[str, torch.Tensor] | None = None) -> None:
        """A model folder (adapter or full weights, and the tokenizer) of `state` (a
        `trained_state()`; None: the current weights) that any HF tool loads."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        named = self._named_trainable()
        with checkpoint_io.live_weights_kept(named):
            if state is not None:
                with torch.no_grad():
                    for name, param in named:
                        param.copy_(state[name].to(param.device, param.dtype))
            self.save_trained(folder)
        self.tokenizer.save_pretrained(str(folder))

    def read_weights(self, folder: Path) -> dict[str, torch.Tensor]:
        """The weights of a model folder `save_weights` wrote, as a `trained_state()`;
        this learner's own weights are left as they were."""
        named = self._named_trainable()
        with checkpoint_io.live_weights_kept(named), damaged_if_unreadable(Path(folder)):
            checkpoint_io.load_weights(self.model, Path(folder))
            return {n: p.detach().to("cpu", copy=True) for n, p in named}

    def save_trained(self, path: Path, weights: dict[str, torch.Tensor] | None = None) -> None:
        """The trained weights only (`checkpoint_io.save_trained`)."""
        checkpoint_io.save_trained(self.model, path, weights)

    def load(self, path: Path) -> None:
        """Restore weights and optimizer state written by `save` into this learner."""
        path = Path(path)
        self._epoch += 1  # whatever happens below, samplers made before are stale
        with damaged_if_unreadable(path):
            checkpoint_io.load_weights(self.model, path)
        if not all(bool(torch.isfinite(p).all()) for _, p in self._named_trainable()):
            raise DamagedCheckpointError(
                f"{path}: the weights hold NaN or inf (a diverged update was saved, or the "
                "file is corrupted); resume from an earlier checkpoint"
            )
        self._optimizer = None
        if not (path / checkpoint_io.OPTIMIZER_JSON).is_file():
            raise DamagedCheckpointError(
                f"{path}: the optimizer state ({checkpoint_io.OPTIMIZER_JSON}) is missing, so "
                "training cannot continue exactly; use an earlier checkpoint (to evaluate "
                "these weights, load the folder as a model instead)"
            )
        names = [n for n, _ in self._named_trainable()]
        with damaged_if_unreadable(path):
            extra = checkpoint_io.load_optimizer(self._get_optimizer(), names, path)
        self.version = int(extra.get("version", self.version))

    def export(self, folder: Path) -> None:
        """A standalone model folder (LoRA merged into a copy of the base) + tokenizer."""
        checkpoint_io.export_merged(self.model, self.tokenizer, Path(folder))

    def before_main_alone(self, checkpoint: bool = False) -> None:
        """One process: rank 0 is alone already."""
