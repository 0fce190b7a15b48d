"""Fully sharded data-parallel learning (FSDP2, `torch.distributed.fsdp.fully_shard`).

`FullyShardedLearner` wraps a `TorchLearner` on every rank of a process group, as
`DataParallelLearner` does, but each rank keeps only its shard (1/N) of every weight, of
the gradients and of AdamW's moments: the memory of a full fine-tuning (weights,
gradients and two moments: 16 bytes a parameter in fp32) is divided by the number of
ranks. Each decoder layer and the model's root are sharded (`shard_model`).

What that asks of the loop, and how this learner gives it:

- **Every rank makes the same calls.** Gathering a layer and reducing its gradient are
  collectives, so the ranks must make them in step although each trains its own share of
  the rows (`datums[rank::world]`, the whole batch's normaliser, as `DataParallelLearner`).
  Two ways, chosen by the learner's `share_prefix` (on in every run; off only through the engine's constructor):
  - shared prefixes (the default): the learner's shared-prefix forwards make the number
    of forwards depend on the rows, so the weights stay whole through the learning step
    (gathered once), the rank's micro-batches run with no collective and their gradients
    accumulate whole on the rank (gradient sync off); then every rank runs one idle
    micro-batch with sync on, which reduce-scatters each layer's accumulated gradient
    once. Memory during learning: whole weights and whole gradients, as data parallelism;
    the optimizer state stays sharded.
  - without: each layer is gathered only while it runs (the least memory for weights); one
    forward per micro-batch, and ranks with fewer micro-batches run idle ones until all
    have run as many as the busiest rank (counts agreed by one all-reduce). On a CPU
    with the embedded model that was 2.5x slower than with shared prefixes and took more
    memory, not less, nearly all of it the lost sharing (docs/results.md, "Data-parallel
    and FSDP").
  An idle micro-batch is one token divided by an infinite normaliser: the same forward
  and backward as a real one, with a zero gradient.
- **Summed gradients.** FSDP averages over ranks by default; here the divide factor is 1,
  so the reduced gradient is exactly the one-process gradient of the whole batch (every
  rank divides its rows by the whole batch's normaliser), and clipping and AdamW see the
  same numbers as one process would (tested to 1e-5 with two gloo processes).
- **Sampling and rank 0's work on whole weights.** The ranks play different games, so
  they make different numbers of forwards: before sampling, every rank gathers the whole
  model once (`gather`, collective) and keeps it whole until the optimizer step frees it
  again (a local operation; without shared prefixes the learning step frees it first).
  The loop calls `before_main_alone` before rank 0 evaluates or writes a checkpoint
  alone; for a checkpoint it also gathers the optimizer's moments, which rank 0 then
  writes in the one-process format: a checkpoint of an FSDP run is a plain checkpoint
  (read by one process, by `spiral export`, or by FSDP again).
- **Resume.** The weights and optimizer state are loaded whole into the inner learner
  first (`load`, every rank reads the same files) and sharded at the first use after.

Memory: sampling holds the whole weights on every rank (as data parallelism does); what
is sharded for the whole run is the optimizer state, and the gradients and weights
outside sampling (and, without shared prefixes, outside each layer's turn in learning).
A checkpoint gathers the weights and AdamW's moments one tensor at a time; rank 0 keeps
CPU copies until it has written them. With full fine-tuning, a KL towards the reference
model (`kl_reference=reference`, `kl_coef > 0`) keeps a whole unsharded copy of the base
model on every rank. A model whose weights alone do not fit one device needs its sampler
elsewhere (vLLM on its own devices) and is not served by this class yet.

Not supported here (refused by the config check, with what to do): population play
(pool members are adapters or weight files over one unsharded model), weight averaging
(`weight_ema_decay`) and the snapshot magnet (`kl_reference=snapshot`), which swap or
copy whole weights in place, and the merged-adapter sampler (it writes merged weights
into the base layers; off under FSDP).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from spiral.algo.losses import combine_diagnostics
from spiral.algo.regularizers import Regularizer
from spiral.engines.base import LossFn
from spiral.engines.torch import checkpoint_io
from spiral.engines.torch.parallel.distributed import RankedLearner
from spiral.types import Datum


def _layer_classes(model: Any) -> set[str]:
    """The class names transformers marks as not to be split (the decoder layers)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT
    for module in (model, inner):
        names = getattr(module, "_no_split_modules", None)
        if names:
            return set(names)
    raise ValueError(
        f"{type(model).__name__} names no decoder-layer class (_no_split_modules); FSDP "
        "needs one to shard layer by layer"
    )


def shard_model(model: Any) -> list[Any]:
    """Shard each decoder layer and the root of `model` in place (FSDP2); return the
    sharded modules, root last. Gradients are summed over ranks (divide factor 1, with
    sum-only collectives, which gloo needs); the root keeps its weights (embeddings,
    norm, output head) gathered after a forward, since the learner applies the output
    head after the model's forward."""
    from torch.distributed.fsdp import fully_shard

    classes = _layer_classes(model)
    layers = [m for m in model.modules() if type(m).__name__ in classes]
    if not layers:
        raise ValueError(f"no module of {sorted(classes)} in {type(model).__name__}")
    sharded = [fully_shard(layer) for layer in layers]
    sharded.append(fully_shard(model, reshard_after_forward=False))
    for module in sharded:
        module.set_gradient_divide_factor(1.0)
        module.set_force_sum_reduction_for_comms(True)
    return sharded


def _idle_row(token: int) -> Datum:
    """One trained token: run with an infinite normaliser, a forward and a backward
    through every layer (so that the ranks' collectives match) whose gradient is zero."""
    return Datum(
        input_ids=(token,),
        target_ids=(token,),
        sampler_logprobs=(0.0,),
        advantages=(0.0,),
        mask=(1.0,),
    )


class FullyShardedLearner(RankedLearner):
    """A TorchLearner whose weights, gradients and optimizer state are sharded over the
    ranks of a process group (FSDP2); see the module's docstring."""

    def __init__(self, inner: Any, group: Any = None) -> None:
        super().__init__(inner, group)
        inner.merge_lora = False  # the merged adapter writes into the base layers
        inner.packed_decode = False  # it would keep (views of) gathered weights past a reshard
        self._modules: list[Any] = []  # the sharded modules, once sharded
        self._whole = False  # weights gathered on this rank (and on every other)
        # The weights and optimizer state gathered whole for a checkpoint (rank 0 writes).
        self._checkpoint: tuple[dict[str, torch.Tensor], dict[str, Any]] | None = None

    @property
    def whole_for_learning(self) -> bool:
        """Prefix sharing makes the number of forwards depend on the rows: with it the
        weights stay whole through the learning step (`_learn_whole`); without it each
        layer is gathered only while it runs, one forward per micro-batch."""
        return bool(self.inner.share_prefix)

    # ----- sharding -------------------------------------------------------------------
    def _shard_model_once(self) -> None:
        """Shard the model at its first use, after any `load`; AdamW's state, if loaded,
        is re-made over the sharded parameters (each rank keeps its shard of it). The
        parameters keep their names and order, so the optimizer's indices still hold."""
        if self._modules:
            return
        loaded = self.inner._optimizer.state_dict() if self.inner._optimizer else None
        self.inner._optimizer = None
        self._modules = shard_model(self.inner.model)
        optimizer = self.inner._get_optimizer()  # over the sharded parameters
        if loaded is not None:
            params = [p for _, p in self.inner._named_trainable()]
            state = {
                i: {key: self._local(value, params[i]) for key, value in per.items()}
                for i, per in loaded["state"].items()
            }
            optimizer.load_state_dict({"state": state, "param_groups": loaded["param_groups"]})

    @staticmethod
    def _local(value: Any, param: Any) -> Any:
        """A whole state tensor shaped like `param`, as this rank's shard of it."""
        from torch.distributed.tensor import DTensor, distribute_tensor

        if (
            isinstance(param, DTensor)
            and isinstance(value, torch.Tensor)
            and value.shape == param.shape
        ):
            # Every rank holds the whole tensor (read from the same file): cut locally.
            return distribute_tensor(
                value.to(param.device), param.device_mesh, param.placements, src_data_rank=None
            )
        return value

    # ----- whole weights for sampling and rank 0's work ------------------------------
    def before_main_alone(self, checkpoint: bool = False) -> None:
        """The whole weights on every rank (and for a checkpoint the optimizer state on
        rank 0): `gather`."""
        self.gather(optimizer=checkpoint)

    def gather(self, optimizer: bool = False) -> None:
        """Every rank's weights whole until the next learning step (collective: every
        rank must call it, at the same point). `optimizer`: also the optimizer's state,
        gathered whole for rank 0 to write in `save`."""
        self._shard_model_once()
        if not self._whole:
            for module in self._modules:
                module.set_reshard_after_forward(False, recurse=False)
                module.unshard()
            self._whole = True
        if optimizer:
            checkpoint = (self._whole_weights(), self._whole_optimizer_state())
            self._checkpoint = checkpoint if self.rank == 0 else None

    def _whole_weights(self) -> dict[str, torch.Tensor]:
        """The trained weights, whole, as CPU copies by parameter name (called while
        whole: the module's parameters are the gathered ones)."""
        from torch.distributed.tensor import DTensor

        found: dict[str, torch.Tensor] = {}
        for name, param in self.inner._named_trainable():
            whole = param.full_tensor() if isinstance(param, DTensor) else param
            if self.rank == 0:
                found[name] = whole.detach().to("cpu", copy=True)
        return found

    def _release(self) -> None:
        """Free the gathered weights (local): from now on each layer is gathered only
        while it runs."""
        self._shard_model_once()
        self._checkpoint = None
        if not self._whole:
            return
        for module in self._modules:
            module.reshard()
            if module is not self._modules[-1]:  # the root keeps its weights after a forward
                module.set_reshard_after_forward(True, recurse=False)
        self._whole = False

    def _whole_optimizer_state(self) -> dict[str, Any]:
        """AdamW's `state_dict()` with every sharded tensor gathered whole (collective,
        one tensor at a time, in the same order on every rank); rank 0 keeps CPU copies,
        the other ranks none."""
        from torch.distributed.tensor import DTensor

        state = self.inner._get_optimizer().state_dict()
        whole: dict[int, dict[str, Any]] = {}
        for index, per in sorted(state["state"].items()):
            gathered = {
                key: (value.full_tensor().cpu() if isinstance(value, DTensor) else value)
                for key, value in sorted(per.items())
            }
            if self.rank == 0:
                whole[index] = gathered
        return {"state": whole, "param_groups": state["param_groups"]}

    def sampler(self) -> Any:
        self.gather()
        return self.inner.sampler()

    def logprobs(self, datums: Sequence[Datum]) -> list[list[float]]:
        self.gather()
        return list(self.inner.logprobs(datums))

    # ----- learning -------------------------------------------------------------------
    def forward_backward(
        self,
        datums: Sequence[Datum],
        loss_fn: LossFn,
        regularizer: Regularizer | None = None,
        normaliser: float | None = None,
    ) -> dict[str, float]:
        normaliser = self.normaliser(datums, normaliser)
        # A row with no trained position adds nothing, and a micro-batch of such rows
        # would skip its backward (and its collectives) on this rank alone.
        mine = [d for d in self.shard(datums) if any(m > 0 for m in d.mask)]
        idle = [_idle_row(int(datums[0].input_ids[0]))]
        if self.whole_for_learning:
            return self._learn_whole(mine, idle, loss_fn, regularizer, normaliser)
        self._release()
        chunks = self.inner._micro_batches(mine, share_prefix=False) if mine else []
        count = torch.tensor([len(chunks)], dtype=torch.int64)
        dist.all_reduce(count, op=dist.ReduceOp.MAX, group=self.group)
        parts = []
        for i in range(int(count.item())):
            # A packed micro-batch is packed again into exactly itself by the inner learner.
            if i < len(chunks):
                batch = [mine[j] for j in chunks[i]]
                parts.append(self.inner.forward_backward(batch, loss_fn, regularizer, normaliser))
            else:  # the same calls as a real micro-batch; loss / inf: zero gradient
                self.inner.forward_backward(idle, loss_fn, regularizer, math.inf)
        return self.combine(combine_diagnostics(parts) if parts else {})

    def _learn_whole(
        self,
        mine: list[Datum],
        idle: list[Datum],
        loss_fn: LossFn,
        regularizer: Regularizer | None,
        normaliser: float,
    ) -> dict[str, float]:
        """Prefix sharing on: the weights stay whole through this rank's micro-batches
        (any number of forwards each, no collective) and their gradients accumulate
        whole on the rank; then one idle micro-batch on every rank, with gradient sync
        on, reduce-scatters every layer's accumulated gradient once."""
        self.gather()
        for module in self._modules:
            module.set_reshard_after_backward(False, recurse=False)
            module.set_requires_gradient_sync(False, recurse=False)
        try:
            local = (
                self.inner.forward_backward(mine, loss_fn, regularizer, normaliser) if mine else {}
            )
            for module in self._modules:
                module.set_requires_gradient_sync(True, recurse=False)
            self.inner.forward_backward(idle, loss_fn, regularizer, math.inf)
        finally:
            for module in self._modules:
                module.set_requires_gradient_sync(True, recurse=False)
                module.set_reshard_after_backward(True, recurse=False)
        return self.combine(local)

    def optim_step(self, learning_rate: float) -> dict[str, float]:
        self._release()  # a step after no forward_backward (the whole batch filtered)
        return dict(self.inner.optim_step(learning_rate))

    # ----- checkpoints ----------------------------------------------------------------
    def save(self, path: Path) -> None:
        """Write a plain (one-process) checkpoint: rank 0 alone calls it, after every rank
        called `gather(optimizer=True)`."""
        if self._checkpoint is None:
            raise RuntimeError(
                "FullyShardedLearner.save needs the whole weights and optimizer state: call "
                "before_main_alone(checkpoint=True) on every rank first"
            )
        weights, state = self._checkpoint
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self._checkpoint = None  # written once; the next checkpoint gathers afresh
        self.inner.save_trained(path, weights)
        self.inner.tokenizer.save_pretrained(str(path))
        names = [n for n, _ in self.inner._named_trainable()]
        extra = {"version": self.inner.version, "temperature": self.inner.temperature}
        checkpoint_io.save_optimizer_state(state, names, path, extra)

    def load(self, path: Path) -> None:
        """Resume: every rank reads the checkpoint whole, before the model is sharded."""
        if self._modules:
            raise RuntimeError(
                "FullyShardedLearner.load after the model was sharded: load a checkpoint "
                "before the first step (the loop's resume does)"
            )
        self.inner.load(path)

    # Frozen copies swap whole weights in: none under FSDP (population play and the
    # snapshot magnet are refused with fsdp=true, spiral/train/data_parallel.py).
    frozen = None

    def trained_state(self) -> dict[str, Any]:
        raise NotImplementedError("the async loop does not run under torchrun")

    def export(self, folder: Path) -> None:
        raise NotImplementedError(
            "export from the run's checkpoint folder in one process: spiral export <checkpoint>"
        )
