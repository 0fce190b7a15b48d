"""Data-parallel learning over torch.distributed (gloo on CPUs, nccl on GPUs).

`DataParallelLearner` wraps a `TorchLearner` on every rank of a process group. Every rank
holds the whole model and the same batch; each runs `forward_backward` on its share of the
rows (round-robin, `datums[rank::world]`) divided by the WHOLE batch's normaliser, and
`optim_step` sums the gradients over the ranks (all-reduce) before the learner clips and
steps. The summed gradient is then exactly the one-process gradient of the whole batch
(tested to 1e-5 with two gloo processes), every rank applies the same update, and the
weights stay equal without being broadcast. Diagnostics are combined over the ranks as
the one-process learner combines them over micro-batches (token-weighted means; sums for
`loss` and `num_tokens`; min / max for `ratio_min` / `ratio_max`). Its frozen copies
(`RankedCopies`: pool members, the magnet) are written by rank 0 and read back by the
others, and `before_main_alone` checks that the replicas agree before every checkpoint.

Launch: `torchrun --nproc-per-node N --no-python spiral train ...` (or Ray actors that set
the same environment variables); `join_from_env()` joins the group (MASTER_ADDR,
MASTER_PORT, RANK, WORLD_SIZE) and returns the process's `Ranks`, which the training loop
asks who writes (rank 0) and whether every rank agrees to stop. `fsdp=true` shards the
weights, gradients and optimizer state instead (`sharded.py`, `FullyShardedLearner`).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from spiral.algo.losses import combine_diagnostics
from spiral.algo.regularizers import Regularizer
from spiral.engines.base import LearnerWrapper, LossFn, Sampler
from spiral.errors import SpiralError
from spiral.types import Datum

# Rank 0 evaluates and checkpoints while the others wait at the next collective: allow
# an evaluation this long (gloo's default is 30 minutes, nccl's 10).
COLLECTIVE_TIMEOUT = timedelta(hours=2)


def init_from_env(backend: str | None = None) -> tuple[int, int]:
    """Join the process group torchrun describes in the environment; (rank, world size).
    gloo on CPUs; with CUDA, nccl for CUDA tensors (the gradients) and gloo for CPU ones
    (the loop's small agreements: stop flags, gathered episodes), unless `backend` says
    otherwise."""
    if not dist.is_initialized():
        cuda = torch.cuda.is_available()
        chosen = backend or ("cpu:gloo,cuda:nccl" if cuda else "gloo")
        if "nccl" in chosen:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend=chosen, timeout=COLLECTIVE_TIMEOUT)
    return dist.get_rank(), dist.get_world_size()


@dataclass(frozen=True)
class Ranks:
    """Where this process stands among the processes of one run: rank 0 of 1 unless
    launched by torchrun. The loop asks it who writes files and whether to stop."""

    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        """The one process that logs, evaluates and writes checkpoints."""
        return self.rank == 0

    def any(self, flag: bool) -> bool:
        """True on every rank if it is true on any (a stop signal seen by one rank)."""
        if self.world == 1:
            return flag
        value = torch.tensor([1 if flag else 0], dtype=torch.int64)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item())

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order, on every rank."""
        if self.world == 1:
            return [obj]
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()


def leave(ranks: Ranks) -> None:
    """Leave the process group `join_from_env` joined (after a last barrier)."""
    if ranks.world > 1 and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


class PeerLostError(SpiralError, RuntimeError):
    """A collective failed because another rank of the run ended."""


# How gloo and nccl word a collective whose peer is gone (torch raises them as
# RuntimeError or one of torch.distributed's DistError kinds).
_PEER_GONE = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|NCCL communicator was "
    r"aborted|remote process exited|Socket Timeout|Timed out waiting",
    re.IGNORECASE,
)


def _first_sentence(err: BaseException) -> str:
    text = re.sub(r"^\[[^\]]*\]\s*", "", str(err).strip())  # gloo's "[source.cc:553] "
    return re.split(r"(?<=\.)\s", text, maxsplit=1)[0][:200]


@contextlib.contextmanager
def peers_watched(ranks: Ranks) -> Iterator[None]:
    """Say in one line (a PeerLostError) that this rank stops because another rank of the
    run ended (killed, out of memory, its host gone) instead of gloo's or nccl's
    traceback from deep inside a collective; any other error passes unchanged."""
    try:
        yield
    except RuntimeError as err:
        lost = isinstance(err, getattr(dist, "DistError", ())) or _PEER_GONE.search(str(err))
        if ranks.world == 1 or isinstance(err, SpiralError) or not lost:
            raise
        raise PeerLostError(
            f"rank {ranks.rank} of {ranks.world} stops: another rank of this run ended "
            f"(its own output above says why: killed, out of memory, a failed host) and "
            f"the step's collective failed ({_first_sentence(err)}). Rerun the same command "
            "to resume from the newest checkpoint"
        ) from err


def join_from_env() -> Ranks:
    """The process group torchrun (or anything setting WORLD_SIZE > 1) asked for, joined;
    a single process otherwise."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return Ranks()
    rank, world = init_from_env()
    return Ranks(rank, world)


class RankedLearner(LearnerWrapper):
    """A TorchLearner on one rank of a process group: each rank trains every world-th
    row of a batch (`shard`) divided by the whole batch's normaliser (`normaliser`), and
    the ranks' diagnostics are combined as one learner's (`combine`)."""

    def __init__(self, inner: Any, group: Any = None) -> None:
        if not dist.is_initialized():
            raise RuntimeError(f"{type(self).__name__} needs torch.distributed initialised")
        self.inner = inner
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)

    def shard(self, datums: Sequence[Datum]) -> list[Datum]:
        """This rank's rows: every world-th row from its rank on."""
        return list(datums[self.rank :: self.world])

    def normaliser(self, datums: Sequence[Datum], given: float | None) -> float:
        """The whole batch's normaliser (the inner learner's rule), unless `given`."""
        if not datums:
            raise ValueError("forward_backward got no datums")
        if given is not None:
            return given
        return sum(d.weight for d in datums) if self.inner.normalize == "datums" else 1.0

    def combine(self, local: dict[str, float]) -> dict[str, float]:
        """The ranks' diagnostics as one learner's (`combine_diagnostics`)."""
        gathered: list[dict[str, float]] = [{} for _ in range(self.world)]
        dist.all_gather_object(gathered, local, group=self.group)
        return combine_diagnostics(gathered)


class RankedCopies:
    """The inner learner's frozen copies on one rank: a copy written to a folder is frozen
    and written by rank 0 and read back by the others once it is there (bit-exact), so no
    two processes write one folder; everything else is each rank's own."""

    def __init__(self, inner: Any, rank: int, group: Any) -> None:
        self.inner, self.rank, self.group = inner, rank, group

    def freeze(self, name: str, folder: Path | None = None) -> None:
        if folder is None:
            self.inner.freeze(name)
            return
        if self.rank == 0:
            self.inner.freeze(name, folder)
        dist.barrier(group=self.group)
        if self.rank != 0:
            self.inner.load(name, folder)

    @property
    def share_model(self) -> bool:
        return bool(self.inner.share_model)

    def save(self, name: str, folder: Path) -> None:
        self.inner.save(name, folder)

    def load(self, name: str, folder: Path) -> None:
        self.inner.load(name, folder)

    def drop(self, name: str) -> None:
        self.inner.drop(name)

    def names(self) -> list[str]:
        return list(self.inner.names())

    def sampler(self, name: str) -> Sampler:
        return self.inner.sampler(name)


class DataParallelLearner(RankedLearner):
    """A TorchLearner whose rows are shared out over the ranks of a process group."""

    def __init__(self, inner: Any, group: Any = None) -> None:
        super().__init__(inner, group)
        self._pending = False  # rows seen since the last optim_step (same on every rank)
        self.broadcast_weights()

    @property
    def frozen(self) -> RankedCopies:
        return RankedCopies(self.inner.frozen, self.rank, self.group)

    def _trainable(self) -> list[torch.Tensor]:
        return [param for _, param in self.inner._named_trainable()]

    def broadcast_weights(self) -> None:
        """Rank 0's trainable weights on every rank (as DDP does when it wraps a model),
        so that ranks start equal even if their initialisation differed."""
        source = 0 if self.group is None else dist.get_global_rank(self.group, 0)
        for param in self._trainable():
            dist.broadcast(param.data, src=source, group=self.group)

    def before_main_alone(self, checkpoint: bool = False) -> None:
        """Before a checkpoint: the replicas checked to agree (`check_in_sync`)."""
        if checkpoint:
            self.check_in_sync()

    def check_in_sync(self) -> None:
        """Raise if the ranks' trainable weights differ (they must: every rank applies the
        same summed gradient). Cheap: one float64 checksum per rank."""
        mine = [0.0, 0.0]
        for param in self._trainable():
            weights = param.detach().double()
            mine[0] += float(weights.sum())
            mine[1] += float((weights * weights).sum())
        sums: list[list[float]] = [[] for _ in range(self.world)]
        dist.all_gather_object(sums, mine, group=self.group)
        if any(s != sums[0] for s in sums):
            raise RuntimeError(
                f"data-parallel replicas diverged: weight checksums per rank {sums}; the "
                "ranks no longer apply the same update (report this with the run folder)"
            )

    def forward_backward(
        self,
        datums: Sequence[Datum],
        loss_fn: LossFn,
        regularizer: Regularizer | None = None,
        normaliser: float | None = None,
    ) -> dict[str, float]:
        normaliser = self.normaliser(datums, normaliser)
        self._pending = True
        mine = self.shard(datums)
        local = self.inner.forward_backward(mine, loss_fn, regularizer, normaliser) if mine else {}
        return self.combine(local)

    def optim_step(self, learning_rate: float) -> dict[str, float]:
        """Sum the gradients over the ranks (one flat all-reduce), then the inner learner
        clips and steps. A step with no rows at all (the whole batch filtered) reduces
        nothing, so AdamW skips the parameters as it does in one process."""
        pending, self._pending = self._pending, False
        if not pending:
            return self.inner.optim_step(learning_rate)
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for param in self._trainable():
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            by_dtype.setdefault(param.grad.dtype, []).append(param.grad)
        for grads in by_dtype.values():
            flat = torch.cat([grad.reshape(-1) for grad in grads])
            dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.group)
            offset = 0
            for grad in grads:
                grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
                offset += grad.numel()
        return self.inner.optim_step(learning_rate)
