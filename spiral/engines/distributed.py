"""Data-parallel learning over torch.distributed (gloo on CPUs, nccl on GPUs).

`DataParallelLearner` wraps a `TorchLearner` on every rank of a process group. Every rank
holds the whole model and the same batch; each runs `forward_backward` on its share of the
rows (round-robin, `datums[rank::world]`) divided by the WHOLE batch's normaliser, and
`optim_step` sums the gradients over the ranks (all-reduce) before the learner clips and
steps. The summed gradient is then exactly the one-process gradient of the whole batch
(tested to 1e-5 with two gloo processes), every rank applies the same update, and the
weights stay equal without being broadcast. Diagnostics are combined over the ranks as
the one-process learner combines them over micro-batches (token-weighted means; sums for
`loss` and `num_tokens`; min / max for `ratio_min` / `ratio_max`).

Launch: `torchrun --nproc-per-node N ...` (or Ray actors that set the same environment
variables) and `init_from_env()` joins the group (MASTER_ADDR, MASTER_PORT, RANK,
WORLD_SIZE). FSDP, for models that do not fit one device, is not built.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from spiral.algo.losses import combine_diagnostics
from spiral.algo.regularizers import Regularizer
from spiral.engines.base import LossFn
from spiral.types import Datum


def init_from_env(backend: str | None = None) -> tuple[int, int]:
    """Join the process group torchrun describes in the environment; (rank, world size).
    gloo on CPUs, nccl when CUDA is there, unless `backend` says otherwise."""
    if not dist.is_initialized():
        chosen = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        dist.init_process_group(backend=chosen)
        if chosen == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    return dist.get_rank(), dist.get_world_size()


class DataParallelLearner:
    """A TorchLearner whose rows are shared out over the ranks of a process group."""

    def __init__(self, inner: Any, group: Any = None) -> None:
        if not dist.is_initialized():
            raise RuntimeError("DataParallelLearner needs torch.distributed initialised")
        self.inner = inner
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)

    def __getattr__(self, name: str) -> Any:  # everything else is the inner learner's
        return getattr(self.inner, name)

    def shard(self, datums: Sequence[Datum]) -> list[Datum]:
        """This rank's rows: every world-th row from its rank on."""
        return list(datums[self.rank :: self.world])

    def forward_backward(
        self,
        datums: Sequence[Datum],
        loss_fn: LossFn,
        regularizer: Regularizer | None = None,
        normaliser: float | None = None,
    ) -> dict[str, float]:
        if not datums:
            raise ValueError("forward_backward got no datums")
        if normaliser is None:
            whole = self.inner.normalize == "datums"
            normaliser = sum(d.weight for d in datums) if whole else 1.0
        mine = self.shard(datums)
        local = self.inner.forward_backward(mine, loss_fn, regularizer, normaliser) if mine else {}
        return self._combine(local)

    def optim_step(self, learning_rate: float) -> dict[str, float]:
        """Sum the gradients over the ranks, then the inner learner clips and steps."""
        for _, param in self.inner._named_trainable():
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            dist.all_reduce(param.grad, op=dist.ReduceOp.SUM, group=self.group)
        return self.inner.optim_step(learning_rate)

    def _combine(self, local: dict[str, float]) -> dict[str, float]:
        """The ranks' diagnostics as one learner's (`combine_diagnostics`)."""
        gathered: list[dict[str, float]] = [{} for _ in range(self.world)]
        dist.all_gather_object(gathered, local, group=self.group)
        return combine_diagnostics(gathered)
