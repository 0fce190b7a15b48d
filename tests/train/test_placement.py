"""The async actor-learner's placement on 1, 2 and 8 GPUs: the learner's GPU is never
handed to an actor, fractions share a device, too few GPUs are refused with the fix."""

from __future__ import annotations

import pytest

from spiral.errors import UsageError
from spiral.train.actors.placement import plan_async

EIGHT = list(range(8))


def test_eight_gpus_one_actor_each_beside_the_learner() -> None:
    plan = plan_async(EIGHT, "cuda", num_actors=7, actor_num_gpus=1)
    assert plan.learner == "cuda:0"
    assert plan.actors == tuple(f"cuda:{g}" for g in range(1, 8))
    assert plan.ray_visible == "1,2,3,4,5,6,7"
    assert plan.describe().startswith("placement: learner on cuda:0; actors: 1 on cuda:1")


def test_the_learner_elsewhere_and_fractions_sharing_a_device() -> None:
    plan = plan_async(EIGHT, "cuda:3", num_actors=4, actor_num_gpus=0.5)
    assert plan.learner == "cuda:3" and 3 not in plan.ray_gpus
    assert plan.actors == ("cuda:0", "cuda:0", "cuda:1", "cuda:1")
    assert plan.describe() == "placement: learner on cuda:3; actors: 2 on cuda:0, 2 on cuda:1"


def test_visible_ids_are_the_machines() -> None:
    plan = plan_async([4, 6], "cuda:1", num_actors=1, actor_num_gpus=1)  # CUDA_VISIBLE=4,6
    assert plan.learner == "cuda:6" and plan.actors == ("cuda:4",) and plan.ray_visible == "4"


def test_two_gpus_and_cpu_actors() -> None:
    assert plan_async([0, 1], "cuda", 1, 1).actors == ("cuda:1",)
    cpu_actors = plan_async([0, 1], "cuda", 3, 0)
    assert cpu_actors.actors == ("cpu",) * 3 and cpu_actors.ray_gpus == (1,)


def test_one_gpu_holds_the_learner_only() -> None:
    with pytest.raises(
        UsageError, match=r"needs 1 GPU\(s\) besides the learner's \(cuda:0\); 0 free"
    ):
        plan_async([0], "cuda", num_actors=1, actor_num_gpus=1)
    assert plan_async([0], "cpu", 2, 0.5).actors == ("cuda:0", "cuda:0")  # learner on the CPU
    with pytest.raises(UsageError, match="this machine shows 1 GPU"):
        plan_async([0], "cuda:1", 1, 0)
