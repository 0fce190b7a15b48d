"""Where the async actor-learner's processes compute: the learner's device, and the GPUs
Ray may hand to actors, chosen on purpose and printed at start.

The learner is the Ray driver and computes on its own device. Ray hands GPUs to actors by
the devices it sees when it starts, and it sees every visible GPU: an actor asking for a
GPU could be given the learner's and hold a second model copy there. So the local Ray
instance is started seeing every visible GPU except the learner's (`ray_visible`), and a
plan that asks for more GPUs than that leaves is refused with the numbers and the fix.
Fractions of a GPU (`actor_num_gpus=0.5`) pack actors onto one device, as Ray does.

The local instance listens on 127.0.0.1 only (`loopback_only`); `ray_address` joins a
running cluster instead, as its operator set it up.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from spiral.errors import UsageError


@dataclass(frozen=True)
class Placement:
    """The learner's device and each actor's (by the GPU ids of this machine)."""

    learner: str  # "cuda:0", "cpu"
    actors: tuple[str, ...]  # one device per actor
    ray_gpus: tuple[int, ...]  # the GPU ids the local Ray instance may hand out

    @property
    def ray_visible(self) -> str:
        """`CUDA_VISIBLE_DEVICES` for the local Ray instance's start."""
        return ",".join(str(g) for g in self.ray_gpus)

    def describe(self) -> str:
        counts: dict[str, int] = {}
        for device in self.actors:
            counts[device] = counts.get(device, 0) + 1
        actors = ", ".join(f"{n} on {d}" for d, n in counts.items())
        return f"placement: learner on {self.learner}; actors: {actors}"


def plan_async(
    visible: list[int], learner: str, num_actors: int, actor_num_gpus: float
) -> Placement:
    """The placement of `num_actors` actors of `actor_num_gpus` GPUs each beside a learner
    on `learner` ("cpu", "cuda", "cuda:N"), on a machine whose visible GPUs have the ids
    `visible` (in `CUDA_VISIBLE_DEVICES` order; "cuda:N" is the N-th of them)."""
    on_gpu = learner.startswith("cuda")
    index = int(learner.partition(":")[2] or 0) if on_gpu else -1
    if on_gpu and index >= len(visible):
        raise UsageError(f"device={learner}, but this machine shows {len(visible)} GPU(s)")
    learner_id = visible[index] if on_gpu else None
    free = [g for g in visible if g != learner_id]
    shown = f"cuda:{learner_id}" if on_gpu else "cpu"
    if actor_num_gpus <= 0:
        return Placement(shown, ("cpu",) * num_actors, tuple(free))
    need = math.ceil(num_actors * actor_num_gpus - 1e-9)
    if need > len(free):
        besides = f" besides the learner's ({shown})" if on_gpu else ""
        raise UsageError(
            f"num_actors={num_actors} actor_num_gpus={actor_num_gpus} needs {need} GPU(s)"
            f"{besides}; {len(free)} free: lower num_actors or actor_num_gpus (fractions "
            "share a GPU), or put the learner on the CPU"
        )
    actors = tuple(f"cuda:{free[int(k * actor_num_gpus + 1e-9)]}" for k in range(num_actors))
    return Placement(shown, actors, tuple(free))


def visible_gpus() -> list[int]:
    """This machine's GPU ids in `CUDA_VISIBLE_DEVICES` order (all of them when unset)."""
    import os

    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    shown = os.environ.get("CUDA_VISIBLE_DEVICES")
    if shown is None:
        return list(range(count))
    ids = [int(x) for x in shown.split(",") if x.strip().isdigit()]
    return ids[:count]


def local_placement(cfg: Any, log: Callable[[str], None]) -> Placement:
    """The placement of `cfg`'s actors (a TrainConfig whose actors are on) on this
    machine, printed."""
    from spiral.engines.loading import resolve_device

    device = resolve_device(cfg.device)
    learner = f"cuda:{device.index or 0}" if device.type == "cuda" else "cpu"
    plan = plan_async(visible_gpus(), learner, cfg.actors.num_actors, cfg.actors.actor_num_gpus)
    log(plan.describe())
    return plan


@contextlib.contextmanager
def ray_sees(plan: Placement | None) -> Iterator[None]:
    """Start the local Ray instance seeing the GPUs `plan` hands out, not the learner's
    (its processes inherit this process's environment when it starts)."""
    import os

    if plan is None or plan.learner == "cpu":
        yield
        return
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = plan.ray_visible
    try:
        yield
    finally:
        if before is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


@contextlib.contextmanager
def loopback_only(ray: Any) -> Iterator[None]:
    """Start a local Ray instance whose servers listen on 127.0.0.1 only. Ray takes the
    machine's reachable address as the node's (so its GCS, raylet and workers listen on
    every interface) unless its own switch for one-machine instances is off
    (`ray_constants.ENABLE_RAY_CLUSTER`, the `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`
    variable): then the node's address is the loopback one and every server binds to it.
    A Ray without that switch starts as it would (Ray's token authentication still
    guards it)."""
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    if constants is None or not hasattr(constants, "ENABLE_RAY_CLUSTER"):
        yield
        return
    before = constants.ENABLE_RAY_CLUSTER
    constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = before
