"""Learners over several processes (torchrun): `distributed.py` (ranks, and data-parallel
learning: each rank trains its share of the rows, gradients summed) and `sharded.py`
(FSDP2: weights, gradients and optimizer state sharded over the ranks)."""

from __future__ import annotations

from typing import Any


def on_ranks(learner: Any, fsdp: bool = False) -> Any:
    """`learner` on every rank of the process group torchrun started: data-parallel
    (each rank trains its share of the rows, gradients summed), or with `fsdp` its
    weights, gradients and optimizer state sharded over the ranks."""
    if fsdp:
        from spiral.engines.torch.parallel.sharded import FullyShardedLearner

        return FullyShardedLearner(learner)
    from spiral.engines.torch.parallel.distributed import DataParallelLearner

    return DataParallelLearner(learner)
