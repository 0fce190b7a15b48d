"""The actors of the asynchronous actor-learner: Ray actors that play batches of games.

`RolloutWorker` is a plain class (Ray wraps it, tests may run it in-process): a model copy
that loads the weights it is sent (only when its version is behind), keeps a copy of the
learner's population for population play (members loaded from the files each batch
refers to, dropped when the pool drops them) and plays a batch with the sync loop's
`collect`. The learner's side, and the design, are in `collector.py`.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spiral.errors import SpiralError
from spiral.evaluation import league as league_lib
from spiral.train.config import TrainConfig
from spiral.train.pool_files import POOL_DIR
from spiral.train.population import Pool, Population, copies
from spiral.train.setup import RunSetup, make_learner_factory
from spiral.train.step import collect
from spiral.types import Episode


def ray_module() -> Any:
    try:
        import ray
    except ImportError as err:
        raise SpiralError(
            "use_async_actor_learner=true needs Ray: pip install 'spiral-selfplay[ray]' "
            "(or drop the key for the sync loop)"
        ) from err
    return ray


class RolloutWorker:
    """The body of one actor: a model copy that plays batches of games with the weights it
    is sent. A plain class (Ray wraps it), so it also runs in-process."""

    def __init__(self, cfg: TrainConfig, setup: RunSetup, num_threads: int) -> None:
        import torch

        torch.set_num_threads(max(1, num_threads))
        self.cfg = cfg
        self.setup = setup
        # Only what sampling needs: no optimizer, no KL reference, and full fine-tuning's
        # weights in the compute dtype (the learner's fp32 masters stay with the learner).
        self.learner = make_learner_factory(self.cfg, sampling_only=True)()
        self.loaded = False
        self.finished: float | None = None  # when the last batch ended (idle time)
        # Population play: pool members as the learner's snapshots (their files in a
        # scratch folder, made when the first member arrives), fixed members' agents.
        self.scratch: Path | None = None
        self.members: set[str] = set()
        self.fixed_agents: dict[str, Any] = {}

    def play(
        self,
        chunk: int,
        games: int,
        weights: Sequence[Any],
        version: int,
        population: dict[str, Any] | None = None,
        member_files: dict[str, Any] | None = None,
    ) -> tuple[list[Episode], dict[str, float]]:
        """`games` games with seeds from (seed, `chunk`) and the weights of `version`
        (`weights[0]`: an object ref, or the state itself, fetched only when needed).
        Population play: `population` is the learner's pool and league (its
        `to_json()`), `member_files` each member's folder (refs to {file: bytes}), read
        only for members this actor does not hold yet."""
        t0 = time.perf_counter()
        if not self.loaded or self.learner.version != version:
            state = weights[0]
            if not isinstance(state, dict):
                state = ray_module().get(state)
            self.learner.load_trained_state(state, version)
            self.loaded = True
        pool = self._population(population, member_files or {})
        t1 = time.perf_counter()
        episodes, metrics = collect(self.cfg, self.setup, self.learner, chunk, pool, games)
        t2 = time.perf_counter()
        idle = t0 - self.finished if self.finished is not None else 0.0
        self.finished = t2
        return episodes, {
            **metrics,
            "actor/load_s": t1 - t0,
            "actor/play_s": t2 - t1,
            "actor/idle_s": idle,  # waiting for this batch since the last one ended
        }

    def _population(
        self, state: dict[str, Any] | None, member_files: dict[str, Any]
    ) -> Population | None:
        """This actor's copy of the learner's population: the same pool (members loaded
        from their files, dropped once the pool lets them go) and league, so the batch's
        matchups are drawn exactly as the sync loop draws them for a step."""
        if state is None:
            return None
        if self.scratch is None:
            self.scratch = Path(tempfile.mkdtemp(prefix="spiral-actor-"))
        pool = Pool.from_json(state.get("pool", {}))
        for name in self.members - set(pool.names):
            copies(self.learner).drop(name)
            self.members.discard(name)
        for name in pool.names:
            if name in self.members:
                continue
            files = member_files[name]
            if not isinstance(files, dict):
                files = ray_module().get(files)
            folder = self.scratch / POOL_DIR / name
            _write_folder(folder, files)
            copies(self.learner).load(name, folder)
            self.members.add(name)
        league = league_lib.from_json(state["league"]) if "league" in state else league_lib.League()
        return Population(self.cfg, self.scratch, pool, league, self.fixed_agents)

    def where(self) -> dict[str, Any]:
        """This actor's process and Ray node (tests, logs)."""
        return {"pid": os.getpid(), "node_id": ray_module().get_runtime_context().get_node_id()}


def read_folder(folder: Path) -> dict[str, bytes]:
    """A pool member's folder as {relative path: bytes}, to travel to other nodes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _write_folder(folder: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
