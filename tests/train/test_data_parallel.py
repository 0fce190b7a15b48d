"""`spiral train` under torchrun: two gloo ranks share a step's games and rows, rank 0
alone writes, the run resumes, and what several ranks cannot run yet is refused.

The gradient itself (two ranks == one process, to 1e-5) is tested in
tests/engines/test_distributed.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from spiral import agents
from spiral.engines.torch.parallel.distributed import Ranks
from spiral.prompts.invalid import invalid_policy
from spiral.rollout.play import GameSpec, derive_seed, play_with_draw_retry
from spiral.train.checkpoint import latest_checkpoint
from spiral.train.config import ConfigError, parse_config
from spiral.train.data_parallel import check_config, sharded_play, shared_setup
from spiral.train.setup import RunSetup

TORCHRUN = Path(sys.executable).with_name("torchrun")
SPIRAL = Path(sys.executable).with_name("spiral")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from spiral.testing import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _specs(n: int) -> list[GameSpec]:
    return [GameSpec("TicTacToe-v0", derive_seed(7, i), ("random", "random")) for i in range(n)]


def _play_rank(rank: int, world: int, init: str, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        ranks = Ranks(rank, world)
        players = {"random": agents.make("random", seed=rank)}
        episodes, metrics = sharded_play(ranks)(
            _specs(5), players, invalid_policy("spiral"), seed=3, max_retries=1
        )
        stop = ranks.any(rank == 1)  # a signal seen by rank 1 only
        # Default run folders named a second apart: every rank takes rank 0's.
        setup = RunSetup(Path(f"runs/started-{rank}"), *([None] * 4))  # type: ignore[arg-type]
        folder = str(shared_setup(setup, ranks).run_dir)
        found = {
            "seeds": [ep.seed for ep in episodes],
            "metrics": metrics,
            "stop": stop,
            "folder": folder,
        }
        (Path(out) / f"rank{rank}.json").write_text(json.dumps(found))
    finally:
        dist.destroy_process_group()


def test_sharded_play_gives_every_rank_the_whole_batch_in_spec_order(tmp_path: Path) -> None:
    world = 2
    mp.spawn(_play_rank, args=(world, f"file://{tmp_path / 'rdv'}", str(tmp_path)), nprocs=world)
    found = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]
    assert found[0] == found[1]
    # A drawn game is re-played under a derived seed, in its own place in the batch.
    for got, spec in zip(found[0]["seeds"], _specs(5), strict=True):
        assert got in (spec.seed, derive_seed(spec.seed, 1))
    _, alone = play_with_draw_retry(
        _specs(5), {"random": agents.make("random")}, invalid_policy("spiral")
    )
    assert found[0]["metrics"]["dist/world_size"] == 2.0
    assert set(found[0]["metrics"]) == {"dist/world_size", *alone}
    assert found[0]["stop"] is True and found[1]["stop"] is True
    assert found[0]["folder"] == found[1]["folder"] == "runs/started-0"


def _cfg(model: Path, *extra: str):  # type: ignore[no-untyped-def]
    return parse_config([f"model_name={model}", "env_ids=TicTacToe-v0", *extra])


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (("use_async_actor_learner=true",), "num_actors"),
        (("sampler_engine=vllm",), "torch engine only"),
        (("batch_size=2",), "fewer than the 4 ranks"),
        (("fsdp=true", "fsp_enabled=true"), "fsdp=true cannot run with fsp_enabled"),
        (("fsdp=true", "weight_ema_decay=0.9"), "cannot run with weight_ema_decay"),
        (
            ("fsdp=true", "kl_reference=snapshot", "kl_magnet_interval=10", "kl_coef=0.2"),
            "cannot run with kl_reference=snapshot",
        ),
    ],
)
def test_what_several_ranks_cannot_run_is_refused(
    tiny_model: Path, extra: tuple[str, ...], says: str
) -> None:
    cfg = _cfg(tiny_model, *extra)
    if "fsdp=true" not in extra:
        check_config(cfg, Ranks(0, 1))  # one process runs it
    with pytest.raises(ConfigError, match=says):
        check_config(cfg, Ranks(0, 4))


def test_fsdp_in_one_process_says_how_to_launch_it(tiny_model: Path) -> None:
    with pytest.raises(ConfigError, match="torchrun --nproc-per-node N"):
        check_config(_cfg(tiny_model, "fsdp=true"), Ranks(0, 1))


def test_a_run_resumes_with_or_without_fsdp(tiny_model: Path) -> None:
    """Its checkpoints are the same either way, and folders from before the key exist."""
    from spiral.train.resume import check_resume_config

    plain, sharded = _cfg(tiny_model).to_json(), _cfg(tiny_model, "fsdp=true").to_json()
    older = {k: v for k, v in plain.items() if k != "fsdp"}
    for saved, new in ((plain, sharded), (sharded, plain), (older, sharded)):
        check_resume_config(saved, new, same_run=True)


def _torchrun_cmd(model: Path, run: Path, steps: int, *extra: str) -> list[str]:
    args = [
        f"model_name={model}",
        "env_ids=TicTacToe-v0",
        "answer_format=constrained",
        "batch_size=8",
        "max_tokens=6",
        "lora_rank=4",
        "eval_every=2",
        "eval_games=4",
        "save_every=2",
        "template=chat",
        f"log_path={run}",
        f"max_steps={steps}",
        *extra,
    ]
    # --standalone: a free port for each launch, so back-to-back launches (a run and its
    # resume) never meet the previous one's port.
    launch = [str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "--no-python"]
    return [*launch, str(SPIRAL), "train", *args]


_ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _torchrun(model: Path, run: Path, steps: int, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = _torchrun_cmd(model, run, steps, *extra)
    return subprocess.run(cmd, capture_output=True, text=True, env=_ENV, timeout=600, check=False)


@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed beside python")
@pytest.mark.parametrize(
    ("extra", "says"),
    [((), "2 data-parallel ranks"), (("fsdp=true",), "2 fully sharded (FSDP) ranks")],
    ids=["replicated", "fsdp"],
)
def test_torchrun_trains_on_two_ranks_writes_once_and_resumes(
    tiny_model: Path, tmp_path: Path, extra: tuple[str, ...], says: str
) -> None:
    run = tmp_path / "run"
    done = _torchrun(tiny_model, run, 3, *extra)
    assert done.returncode == 0, done.stderr[-3000:]
    assert says in done.stdout
    assert done.stdout.count("step 3/3") == 1  # rank 0 alone logs
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "dist/world_size" in r]
    assert [r["step"] for r in steps] == [0, 1, 2]  # one row per step: rank 0 alone writes
    for row in steps:  # every step trained on the whole batch, played by both ranks
        assert row["dist/world_size"] == 2.0
        assert row["train/overall/num_games"] == 4.0
    evals = [r["step"] for r in rows if any(k.startswith("eval/") for k in r)]
    assert evals == [0, 2, 3]
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*")) == [
        "step_000002",
        "step_000003",
    ]

    # Resume on two ranks from step 3 (both read it; their weights are checked equal at
    # the next checkpoint, which raises if a rank diverged).
    # A checkpoint of either kind is a plain one: one process resumes from it.
    from spiral.engines.loading import ModelConfig
    from spiral.engines.torch.learner import TorchLearner

    alone = TorchLearner(ModelConfig(model=str(tiny_model), lora_rank=4, device="cpu"))
    alone.load(run / "checkpoints" / "step_000003" / "learner")
    assert alone.version == 3

    shutil.rmtree(run / "checkpoints" / "step_000003")
    again = _torchrun(tiny_model, run, 4, *extra)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from" in again.stdout and "step_000002 at step 2" in again.stdout
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "dist/world_size" in r] == [0, 1, 2, 3]


@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed beside python")
def test_ctrl_c_under_torchrun_stops_every_rank_after_one_step_with_a_checkpoint(
    tiny_model: Path, tmp_path: Path
) -> None:
    run, out = tmp_path / "run", tmp_path / "out.log"
    proc, workers = _two_ranks_at(tiny_model, run, out, step=3)
    assert len(workers) == 2
    proc.send_signal(signal.SIGINT)  # torchrun forwards it to both ranks
    proc.wait(timeout=120)
    text = out.read_text()
    assert "stopped by SIGINT: saved" in text
    saved = int(text.split("checkpoints/step_")[-1][:6])
    # The checkpoint of the step every rank agreed on is the newest one the index names.
    newest = latest_checkpoint(run / "checkpoints")
    assert newest is not None and newest.name == f"step_{saved:06d}"
    assert saved >= 3
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()]


def _two_ranks_at(
    model: Path, run: Path, out: Path, step: int
) -> tuple[subprocess.Popen[bytes], list[int]]:
    """A two-rank torchrun training run logging to `out`, once it has logged `step`; and
    its rank processes."""
    with out.open("w") as log:
        proc = subprocess.Popen(
            _torchrun_cmd(model, run, steps=500), stdout=log, stderr=subprocess.STDOUT, env=_ENV
        )
    deadline = time.monotonic() + 300
    while f"step {step}/" not in out.read_text():
        assert proc.poll() is None, out.read_text()[-3000:]
        assert time.monotonic() < deadline, f"training did not reach step {step}"
        time.sleep(0.3)
    return proc, _children(proc.pid)


def _children(pid: int) -> list[int]:
    found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(child) for child in found]


@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed beside python")
def test_population_play_under_torchrun_writes_members_once_and_resumes(
    tiny_model: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    fsp = ("fsp_enabled=true", "fsp_update_interval=1", "eval_every=0")
    done = _torchrun(tiny_model, run, 3, *fsp)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert [r["fsp/pool_size"] for r in rows] == [1.0, 2.0, 3.0]
    members = sorted(p.name for p in (run / "pool").iterdir())
    assert len(members) == 3 and not [m for m in members if m.startswith(".tmp")]
    league = json.loads((run / "league.json").read_text())
    assert len(league["ratings"]) >= 2  # the policy and the members it met

    shutil.rmtree(run / "checkpoints" / "step_000003")
    again = _torchrun(tiny_model, run, 4, *fsp)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "step_000002 at step 2" in again.stdout
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["fsp/pool_size"] for r in rows] == [1.0, 2.0, 3.0, 4.0]


@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed beside python")
def test_a_killed_rank_is_summarised_in_one_line_by_the_survivor(
    tiny_model: Path, tmp_path: Path
) -> None:
    run, out = tmp_path / "run", tmp_path / "out.log"
    proc, workers = _two_ranks_at(tiny_model, run, out, step=2)
    os.kill(max(workers), signal.SIGKILL)  # the rank started last
    proc.wait(timeout=120)
    text = out.read_text()
    assert "stops: another rank of this run ended" in text, text[-3000:]
    assert "Rerun the same command" in text
    # The survivor's own traceback is gone (torchrun's summary of the job is its own).
    assert not [
        line for line in text.splitlines() if line.startswith("[rank") and "Traceback" in line
    ]
    assert "Connection closed by peer" not in text.split("stops: another rank")[0]


def test_peers_watched_names_a_lost_peer_and_passes_other_errors() -> None:
    from spiral.engines.torch.parallel.distributed import PeerLostError, peers_watched

    gloo = "[/src/gloo/transport/tcp/pair.cc:553] Connection closed by peer [1.2.3.4]:5. More."
    with (
        pytest.raises(
            PeerLostError,
            match=r"rank 1 of 2 stops.*\(Connection closed by peer \[1\.2\.3\.4\]:5\.\)",
        ),
        peers_watched(Ranks(1, 2)),
    ):
        raise RuntimeError(gloo)
    with (
        pytest.raises(RuntimeError, match="shape mismatch"),
        peers_watched(Ranks(1, 2)),
    ):  # not a lost peer: unchanged
        raise RuntimeError("shape mismatch")
    with (
        pytest.raises(RuntimeError, match="Connection closed"),
        peers_watched(Ranks()),
    ):  # one process: no peers
        raise RuntimeError(gloo)
