"""The async actor-learner as processes: Ctrl-C and a killed driver leave no Ray process
behind, a hung actor never blocks the learner forever, and actors run on another node
of a Ray cluster (a head and a worker node on this machine, Ray's own cluster utilities).

Each test starts (and ends) its own Ray instance, so none may run in this process
beforehand (the other async tests share one in their own module)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from spiral.train.actors.collector import ActorsFailedError, AsyncCollector  # noqa: E402
from spiral.train.actors.reaper import alive, ray_descendants  # noqa: E402
from spiral.train.config import parse_config  # noqa: E402
from spiral.train.setup import build_setup, make_learner_factory  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from spiral.testing import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(autouse=True)
def no_ray_in_this_process() -> None:
    if ray.is_initialized():
        ray.shutdown()


def _args(model: Path, log_path: Path, *extra: str) -> list[str]:
    return [
        f"model_name={model}",
        "env_ids=TicTacToe-v0",
        "answer_format=constrained",
        "batch_size=8",
        "max_tokens=6",
        "lora_rank=4",
        "eval_every=0",
        "save_every=100",
        "template=chat",
        f"log_path={log_path}",
        "use_async_actor_learner=true",
        *extra,
    ]


def _start_training(
    model: Path, tmp_path: Path, steps: int = 500
) -> tuple[subprocess.Popen[str], dict[int, int]]:
    """`spiral train` in async mode until its third step, and the Ray processes it runs."""
    cmd = [
        sys.executable,
        "-m",
        "spiral.cli",
        "train",
        *_args(model, tmp_path / "run"),
        f"max_steps={steps}",
    ]
    log = (tmp_path / "out.log").open("w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    while "step 3/" not in (tmp_path / "out.log").read_text():
        assert proc.poll() is None, (tmp_path / "out.log").read_text()[-2000:]
        assert time.monotonic() < deadline, "training did not reach step 3"
        time.sleep(0.5)
    noted = ray_descendants(proc.pid)
    assert any("RolloutWorker" in Path(f"/proc/{p}/cmdline").read_text() for p in noted)
    return proc, noted


def _gone_within(noted: dict[int, int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while alive(noted) and time.monotonic() < deadline:
        time.sleep(0.5)
    return alive(noted)


def test_ctrl_c_saves_and_leaves_no_ray_process(tiny_model: Path, tmp_path: Path) -> None:
    proc, noted = _start_training(tiny_model, tmp_path)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    assert "stopped by SIGINT: saved" in (tmp_path / "out.log").read_text()
    assert _gone_within(noted, 20) == []


def test_a_killed_driver_leaves_no_ray_process(tiny_model: Path, tmp_path: Path) -> None:
    proc, noted = _start_training(tiny_model, tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    # Ray's agents would outlive it by about a minute; the reaper takes them down.
    assert _gone_within(noted, 15) == []


def test_a_hung_actor_never_blocks_the_learner(tiny_model: Path, tmp_path: Path) -> None:
    # Every batch overruns a 50 ms timeout; without restarts left the run stops, quickly.
    cfg = parse_config(
        [*_args(tiny_model, tmp_path / "run", "actor_timeout_s=0.05", "actor_max_restarts=0")]
    )
    learner = make_learner_factory(cfg)()
    started = time.monotonic()
    with (
        pytest.raises(ActorsFailedError, match="actor_timeout_s"),
        AsyncCollector(cfg, build_setup(cfg), 0, lambda _: None) as collector,
    ):
        collector(learner, 0)
    assert time.monotonic() - started < 120
    assert collector.timeouts >= 1
    assert not ray.is_initialized()  # the collector started Ray, so it shut it down


def test_actors_run_on_a_worker_node_of_a_cluster(tiny_model: Path, tmp_path: Path) -> None:
    from ray.cluster_utils import Cluster

    # The head offers no CPU, so the actor (1 CPU) can only be placed on the worker node.
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    worker = cluster.add_node(num_cpus=1)
    try:
        cluster.wait_for_nodes()
        cfg = parse_config(
            [*_args(tiny_model, tmp_path / "run", f"ray_address={cluster.address}", "max_steps=2")]
        )
        learner = make_learner_factory(cfg)()
        with AsyncCollector(cfg, build_setup(cfg), 0, lambda _: None) as collector:
            where = ray.get(collector.actors[0].where.remote())
            episodes, metrics = collector(learner, 0)
            assert collector.owns_ray  # joined the cluster; leaving it does not stop it
        assert where["node_id"] == worker.node_id
        assert where["node_id"] != cluster.head_node.node_id
        assert len(episodes) == cfg.games_per_step
        assert metrics["async/policy_version"] == 0
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


def test_the_async_benchmark_reports_both_loops_and_the_model(tiny_model: Path) -> None:
    from spiral.bench.async_loop import run_async_benchmark

    tiny = ["batch_size=8", "max_tokens=6", "lora_rank=4", "template=chat"]
    out = run_async_benchmark(model=str(tiny_model), steps=2, warmup=1, extra=tiny)
    for mode in ("sync", "async"):
        assert out[f"async/{mode}/games_per_s"] == pytest.approx(4 / out[f"async/{mode}/step_s"])
        assert out[f"async/{mode}/trained_tokens_per_s"] > 0
    assert out["async/async/staleness_mean"] > 0  # the actor played ahead of the learner
    assert out["async/async_over_sync/games_per_s"] == pytest.approx(
        out["async/async/games_per_s"] / out["async/sync/games_per_s"]
    )
    sample, learn = out["async/sync/sample_s"], out["async/sync/learn_s"]
    assert out["async/model/own_devices_speedup"] == pytest.approx(
        (sample + learn) / (max(sample, learn) + out["async/async/publish_s"])
    )
    assert not ray.is_initialized()


def _listening(pids: list[int]) -> list[str]:
    """The addresses the processes `pids` listen on (TCP, IPv4 and IPv6)."""
    inodes: dict[str, str] = {}
    for name in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                inodes[fields[9]] = fields[1].split(":")[0]
    found = []
    for pid in pids:
        try:
            links = [os.readlink(f) for f in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:
            continue
        found += [
            inodes[link[8:-1]]
            for link in links
            if link.startswith("socket:[") and link[8:-1] in inodes
        ]
    return found


LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}


def test_the_local_ray_instance_listens_on_loopback_only(tiny_model: Path, tmp_path: Path) -> None:
    proc, noted = _start_training(tiny_model, tmp_path)
    try:
        addresses = _listening([*alive(noted), proc.pid])
        assert addresses, "no Ray server was found listening"
        assert set(addresses) <= LOOPBACK, addresses
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    assert _gone_within(noted, 20) == []


def test_a_run_that_ends_after_its_gcs_died_leaves_no_ray_process(
    tiny_model: Path, tmp_path: Path
) -> None:
    proc, noted = _start_training(tiny_model, tmp_path, steps=6)
    gcs = [p for p in alive(noted) if "gcs_server" in Path(f"/proc/{p}/cmdline").read_text()]
    assert len(gcs) == 1
    os.kill(gcs[0], signal.SIGKILL)
    proc.wait(timeout=240)  # the run ends (its last steps, or Ray giving up on its GCS)
    # ray.shutdown() without a GCS leaves Ray's agents running; the reaper ends them.
    assert _gone_within(noted, 15) == []
