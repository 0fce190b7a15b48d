"""FSDP over two gloo processes: the one-process gradient and update (to 1e-5), ranks
with unequal micro-batch counts, sampling different amounts per rank in between, a
checkpoint written by rank 0 equal to the one-process checkpoint, and a resume from it
that continues as one process does; LoRA, full fine-tuning, LoRA with gradient
checkpointing (each layer's forward runs again in the backward: gathered again), and LoRA
with prefix sharing (the weights stay whole through the learning step, gradients are
reduce-scattered once at its end)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from spiral.engines.base import SamplingParams

from .test_distributed import LOSS, REG, _datums

# 8 tokens a micro-batch: rank 0's rows (input lengths 4, 3, 2) need two micro-batches,
# rank 1's (3, 4) one, so rank 1 must run an idle one to keep the collectives matched.
BUDGET = 8


def _learner(model: str, kind: str):  # type: ignore[no-untyped-def]
    from spiral.engines.loading import ModelConfig
    from spiral.engines.torch.learner import TorchLearner

    cfg = ModelConfig(
        model=model,
        lora_rank=0 if kind == "full" else 4,
        device="cpu",
        dtype="float32",
        gradient_checkpointing=kind == "lora-checkpointing",
        seed=0,
    )
    return TorchLearner(cfg, micro_batch_tokens=BUDGET, share_prefix=kind == "lora-shared-prefix")


def _two_steps(learner, grads: dict[str, torch.Tensor]) -> list[dict[str, float]]:  # type: ignore[no-untyped-def]
    """Learn (the first gradient, whole, into `grads`), sample (unequal amounts per rank
    under FSDP), learn again."""
    found = [learner.forward_backward(_datums(), LOSS, REG)]
    grads.update(_whole(learner, grad=True))
    found.append(learner.optim_step(1e-2))
    rank = getattr(learner, "rank", 0)
    sampler = learner.sampler()
    sampler.sample([[3, 4, 5]] * (1 + 2 * rank), SamplingParams(max_tokens=2 + 3 * rank, seed=rank))
    # One row: rank 1 has none of it and runs only the idle micro-batch.
    found += [learner.forward_backward(_datums()[:1], LOSS, REG), learner.optim_step(1e-2)]
    return found


def _is_sharded(learner) -> bool:  # type: ignore[no-untyped-def]
    """Every trained weight and AdamW moment is held as this rank's shard only."""
    from torch.distributed.tensor import DTensor

    learner._release()
    optimizer = learner.inner._get_optimizer()
    held = [p for _, p in learner.inner._named_trainable()]
    held += [optimizer.state[p]["exp_avg"] for p in held]
    return all(isinstance(t, DTensor) and t.to_local().numel() < t.numel() for t in held)


def _whole(learner, grad: bool = False) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
    """The trained weights (or their gradients), gathered whole from FSDP's shards."""
    from torch.distributed.tensor import DTensor

    from spiral.engines.torch.parallel.sharded import FullyShardedLearner

    if isinstance(learner, FullyShardedLearner):
        learner._release()  # the sharded parameters (not whole copies) hold the gradients
    inner = getattr(learner, "inner", learner)
    found = {n: p.grad if grad else p for n, p in inner._named_trainable()}
    return {
        n: (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()
        for n, t in found.items()
    }


def _rank(rank: int, world: int, model: str, kind: str, init: str, out: str) -> None:
    import torch.distributed as dist

    from spiral.engines.torch.parallel.sharded import FullyShardedLearner

    torch.set_num_threads(1)
    # A collective that one rank misses fails the test in two minutes, not gloo's 30.
    dist.init_process_group(
        "gloo", init_method=init, rank=rank, world_size=world, timeout=timedelta(seconds=120)
    )
    try:
        learner = FullyShardedLearner(_learner(model, kind))
        chunks = learner.inner._micro_batches(_datums()[rank::world], share_prefix=False)
        grads: dict[str, torch.Tensor] = {}
        metrics = _two_steps(learner, grads)
        sharded = _is_sharded(learner)
        weights = _whole(learner)
        learner.before_main_alone(checkpoint=True)
        if rank == 0:  # rank 0 alone writes and samples (an evaluation), no collective
            learner.save(Path(out) / "ckpt")
            learner.sampler().sample([[3, 4]] * 3, SamplingParams(max_tokens=4, seed=0))
        dist.barrier()
        resumed = FullyShardedLearner(_learner(model, kind))
        resumed.load(Path(out) / "ckpt")
        resumed.forward_backward(_datums(), LOSS, REG)
        resumed.optim_step(1e-2)
        torch.save(
            {"grads": grads, "weights": weights, "resumed": _whole(resumed)},
            Path(out) / f"rank{rank}.pt",
        )
        found = {"metrics": metrics, "micro_batches": len(chunks), "sharded": sharded}
        (Path(out) / f"rank{rank}.json").write_text(json.dumps(found))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from spiral.testing import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.mark.parametrize("kind", ["lora", "full", "lora-checkpointing", "lora-shared-prefix"])
def test_fsdp_on_two_gloo_ranks_learns_saves_and_resumes_as_one_process(
    tiny_model: Path, tmp_path: Path, kind: str
) -> None:
    world = 2
    init = f"file://{tmp_path / 'rendezvous'}"
    args = (world, str(tiny_model), kind, init, str(tmp_path))
    mp.spawn(_rank, args=args, nprocs=world, join=True)

    single = _learner(str(tiny_model), kind)
    grads: dict[str, torch.Tensor] = {}
    metrics = _two_steps(single, grads)
    weights = _whole(single)
    single.save(tmp_path / "single")
    single.forward_backward(_datums(), LOSS, REG)
    single.optim_step(1e-2)
    resumed = _whole(single)

    found = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]
    # Rank 1 had fewer micro-batches than rank 0 (it ran an idle one to match them).
    assert [f["micro_batches"] for f in found] == [2, 1]
    assert [f["sharded"] for f in found] == [True, True]
    for rank in range(world):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        assert got["grads"].keys() == grads.keys() == weights.keys()
        for name, grad in grads.items():  # the summed gradient is one process's
            torch.testing.assert_close(got["grads"][name], grad, rtol=0, atol=1e-5)
        # Two (three) updates as one process made them; Adam's first steps divide by |g|,
        # so a 1e-7 difference in a near-zero gradient moves a weight by up to ~1e-5 a
        # step at lr 1e-2: the bound of the data-parallel test.
        for name, weight in weights.items():
            torch.testing.assert_close(got["weights"][name], weight, rtol=0, atol=1e-4)
            torch.testing.assert_close(got["resumed"][name], resumed[name], rtol=0, atol=1e-4)
        for ours, theirs in zip(found[rank]["metrics"], metrics, strict=True):
            assert ours.keys() == theirs.keys()
            for key, value in theirs.items():
                assert ours[key] == pytest.approx(value, rel=1e-4, abs=1e-6), (key, ours, theirs)

    # Rank 0's checkpoint is the one-process checkpoint: same files, same tensors.
    ckpt, plain = tmp_path / "ckpt", tmp_path / "single"
    assert sorted(p.name for p in ckpt.iterdir()) == sorted(p.name for p in plain.iterdir())
    for file in ("optimizer.safetensors", *(p.name for p in plain.glob("*model*.safetensors"))):
        ours, theirs = load_file(str(ckpt / file)), load_file(str(plain / file))
        assert ours.keys() == theirs.keys(), file
        for key in theirs:
            torch.testing.assert_close(ours[key], theirs[key], rtol=0, atol=1e-4)
    assert json.loads((ckpt / "optimizer.json").read_text()) == json.loads(
        (plain / "optimizer.json").read_text()
    )
