"""The asynchronous actor-learner on Ray (`use_async_actor_learner=true`).

    actors (Ray, each its own model copy):  collect(batch k, newest weights they hold)
        -> episodes tagged with the policy version that played them
    learner (this process):  replay buffer -> drop games older than max_staleness
        -> learn (the sync loop's function) -> publish the new weights -> ...

`AsyncCollector` is a `Collector` (spiral/train/step.py): the loop asks it for a step's
games exactly where the sync loop plays them, so everything else (RAE, assembling,
the update, evaluation, checkpoints, stopping) is the same code. Choices:

- **The learner drives; actors play on.** Batches of `ceil(games_per_step / num_actors)`
  games are queued at the actors (`RolloutWorker.play`, actors.py), the least loaded
  first, while the replay buffer has room for their games; whenever batches come back,
  the next ones go out with the newest weights, also while the learner learns.
  `replay_buffer_size` (default one step's games) so sets how far the actors run ahead:
  one step's room is a lag of one version. Actors take new weights between batches,
  never mid-game.
- **Weights travel through Ray's object store**, put once per version: with LoRA only the
  adapter (`Learner.trained_state`), with full fine-tuning every weight. An actor fetches
  them only when its version is behind.
- **Staleness**: a game trained at learner version V was played by version >= V -
  `replay_buffer_max_staleness`; older games are dropped (`ReplayBuffer`). The
  importance ratio corrects the rest (`ppo` clips it); its statistics per staleness are
  metrics (`staleness/<k>/...`, spiral/train/step.py). With max_staleness 0 actors get no
  work while the learner learns (their games would be stale on arrival): lock-step, the
  sync loop's data on the actors.
- **Faults**: an actor that dies loses its batch in flight (dropped whole, never half
  counted: a batch is returned whole or not at all) and Ray restarts it
  (`actor_max_restarts`); a batch that takes longer than `actor_timeout_s` is abandoned
  and its actor killed and restarted; a run whose actors died more often than they may
  be restarted stops with the reason. An error inside the games (a bug) is raised as is.
- **Shutdown and resume**: on exit (end, Ctrl-C, crash) the actors are killed and a Ray
  instance this process started is shut down; if this process is killed outright, a
  watchdog (`reaper.py`) takes that instance's processes down. Games still in the buffer are dropped, not
  saved: a resumed run starts from the checkpoint's weights and version with an empty
  buffer (checkpoints hold the learner's version).
- **Population play**: every batch carries the learner's pool and league (`to_json`) and
  refs to each member's folder (put once per member), so all actors hold the same
  members (loaded as snapshots, dropped when the pool lets them go) and draw a batch's
  matchups exactly as the sync loop draws a step's; the learner records the games it
  trains on in its league. Staleness counts the policy's version only (members never
  change), unlike the original, whose FSP games aged by the older matchup step.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from spiral.engines.base import Learner
from spiral.errors import SpiralError
from spiral.train.actors.placement import local_placement, loopback_only, ray_sees
from spiral.train.actors.reaper import Reaper
from spiral.train.actors.replay import ReplayBuffer, Tagged, episode_version
from spiral.train.actors.worker import RolloutWorker, ray_module, read_folder
from spiral.train.config import TrainConfig
from spiral.train.pool_files import POOL_DIR
from spiral.train.population import SELF, Population
from spiral.train.setup import RunSetup
from spiral.train.step import POLICY, mean_metrics
from spiral.types import Episode


class ActorsFailedError(SpiralError, RuntimeError):
    """The actors died (or hung) more often than they may be restarted."""


@dataclass
class _Flight:
    """A batch of games (or, with games == 0, a ping) sent to an actor."""

    actor: int
    games: int
    version: int
    started: float | None  # when the actor began it (None: queued behind another)


class AsyncCollector:
    """A `Collector` whose games come from Ray actors through a replay buffer."""

    def __init__(
        self,
        cfg: TrainConfig,
        setup: RunSetup,
        first_step: int,
        log: Callable[[str], None] = print,
    ) -> None:
        self.ray = ray_module()
        if cfg.actors is None:
            raise SpiralError("the async collector needs use_async_actor_learner=true")
        self.cfg, self.log, self.opts = cfg, log, cfg.actors
        self.games_per_batch = math.ceil(cfg.games_per_step / self.opts.num_actors)
        capacity = self.opts.replay_buffer_size or cfg.games_per_step
        if capacity < cfg.games_per_step:
            raise SpiralError(
                f"replay_buffer_size={capacity} holds less than one step's "
                f"{cfg.games_per_step} games; raise it (0 = one step's games)"
            )
        self.buffer = ReplayBuffer(capacity, self.opts.replay_buffer_max_staleness)
        self.owns_ray = not self.ray.is_initialized()
        self.reaper = Reaper()
        if self.owns_ray:
            if not self.opts.ray_address:  # our own local instance: taken down however we end
                self.reaper.start()
            local = not self.opts.ray_address
            with (
                ray_sees(local_placement(cfg, log) if local else None),
                loopback_only(self.ray) if local else contextlib.nullcontext(),
            ):
                self.ray.init(
                    address=self.opts.ray_address or None,
                    include_dashboard=False,
                    configure_logging=False,
                    log_to_driver=True,
                )
        remote = self.ray.remote(RolloutWorker).options(
            num_cpus=self.opts.actor_num_cpus,
            num_gpus=self.opts.actor_num_gpus,
            max_restarts=self.opts.actor_max_restarts,
            max_task_retries=0,
        )
        threads = max(1, int(self.opts.actor_num_cpus))
        self.actors = [remote.remote(cfg, setup, threads) for _ in range(self.opts.num_actors)]
        self.flights: dict[Any, _Flight] = {}  # in launch order
        self.next_chunk = first_step * 1000  # batch indices (seeds) never reused on resume
        self.weights: Any = None
        self.version = -1
        self.failures = self.timeouts = self.games_lost = 0
        self.gone: set[int] = set()  # actors Ray will not restart again
        self._chunk_metrics: list[dict[str, float]] = []
        self.population: Population | None = None
        self.publish_s = 0.0  # the learner's time to hand its new weights over
        self.member_refs: dict[str, Any] = {}  # pool member -> ref to its folder's files

    # ----- the Collector ----------------------------------------------------------------
    def __call__(
        self, learner: Learner, step: int, population: Population | None = None
    ) -> tuple[list[Episode], dict[str, float]]:
        """A step's games: fresh enough for `learner.version`, oldest first."""
        t0 = time.perf_counter()
        self.population = population
        self.buffer.max_staleness = self._max_staleness(step)
        self._publish(learner)
        need, version = self.cfg.games_per_step, learner.version
        while True:
            self.buffer.drop_stale(version)  # stale games never hold the room fresh ones need
            if len(self.buffer) >= need:
                break
            # lock-step: no more games than this step needs (more would go stale unplayed)
            self._launch(
                self.buffer.room() if self.buffer.max_staleness else need - len(self.buffer)
            )
            self._harvest()
        stats = self.buffer.stats(version)  # before taking: what the learner found
        taken = self.buffer.take(need, version)
        waited = time.perf_counter() - t0
        if self._max_staleness(step + 1) > 0:
            self._launch()  # play on while the learner learns
        ages = [version - t.version for t in taken]
        metrics = {
            **mean_metrics(self._chunk_metrics),  # the actors' batches since the last step
            **stats,
            "async/wait_s": waited,
            "async/publish_s": self.publish_s,
            "async/policy_version": float(version),
            "async/staleness_mean": sum(ages) / len(ages),
            "async/staleness_max": float(max(ages)),
            "async/actor_failures": float(self.failures),
            "async/actor_timeouts": float(self.timeouts),
            "async/games_lost": float(self.games_lost),
            "async/batches_in_flight": float(sum(1 for f in self.flights.values() if f.games)),
        }
        self._chunk_metrics = []
        episodes = [t.episode for t in taken]
        if population is not None:  # the league counts the games the learner trains on
            population.record(episodes)
            metrics.update(population.metrics(step, [_opponent(ep) for ep in episodes]))
        return episodes, metrics

    def _max_staleness(self, step: int) -> int:
        """The staleness bound (the same at every step)."""
        return self.opts.replay_buffer_max_staleness

    # ----- actors -----------------------------------------------------------------------
    def _publish(self, learner: Learner) -> None:
        t0 = time.perf_counter()
        if learner.version != self.version or self.weights is None:
            self.weights = self.ray.put(learner.trained_state())
            self.version = learner.version
        self.publish_s = time.perf_counter() - t0

    def _launch(self, room: int | None = None) -> None:
        """Send batches with the newest weights while there is room for their games (the
        buffer's, or `room`), each to the actor with the fewest queued (an actor plays its
        queue in order)."""
        room = self.buffer.room() if room is None else room
        held = sum(f.games for f in self.flights.values())
        pinged = {f.actor for f in self.flights.values() if not f.games}
        ready = [i for i in range(len(self.actors)) if i not in self.gone and i not in pinged]
        while ready and room - held > 0 and self.buffer.room() - held >= self.games_per_batch:
            queued = {i: 0 for i in ready}
            for f in self.flights.values():
                if f.actor in queued:
                    queued[f.actor] += 1
            index = min(ready, key=lambda i: queued[i])
            ref = self.actors[index].play.remote(
                self.next_chunk, self.games_per_batch, [self.weights], self.version, *self._pool()
            )
            started = time.monotonic() if queued[index] == 0 else None
            self.flights[ref] = _Flight(index, self.games_per_batch, self.version, started)
            self.next_chunk += 1
            held += self.games_per_batch

    def _pool(self) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """The population as a batch carries it: pool and league, and refs to the
        members' files (put in the object store once per member)."""
        population = self.population
        if population is None:
            return None, {}
        names = population.pool.names
        for name in set(self.member_refs) - set(names):
            del self.member_refs[name]
        for name in names:
            if name not in self.member_refs:
                folder = population.run_dir / POOL_DIR / name
                self.member_refs[name] = self.ray.put(read_folder(folder))
        return population.to_json(), {name: self.member_refs[name] for name in names}

    def _ping(self, index: int) -> None:
        """Ask a restarting actor where it is: it gets work again once it answers."""
        ref = self.actors[index].where.remote()
        self.flights[ref] = _Flight(index, 0, self.version, time.monotonic())

    def _harvest(self) -> None:
        """Wait for at least one batch (or a timeout); buffer what came back whole."""
        if not self.flights:
            raise ActorsFailedError(
                "no actor can play: every actor is gone (restarts used up) or the replay "
                "buffer holds less than a batch; see the log above"
            )
        ready, _ = self.ray.wait(list(self.flights), num_returns=1, timeout=self._wait_s())
        if not ready:
            self._abandon_overdue()
            return
        errors = self.ray.exceptions
        for ref in ready:
            flight = self.flights.pop(ref, None)
            if flight is None:  # dropped with its actor's queue meanwhile
                continue
            try:
                result = self.ray.get(ref)
            except errors.ActorDiedError as err:  # Ray will not restart it again
                self.gone.add(flight.actor)
                self._lost(flight, f"actor {flight.actor} is gone ({type(err).__name__})")
                continue
            except errors.RayActorError as err:  # it died; Ray is restarting it
                self._lost(flight, f"actor {flight.actor} died ({type(err).__name__})")
                time.sleep(0.1)
                self._ping(flight.actor)
                continue
            self._next_in_queue_starts(flight.actor)
            if flight.games:
                episodes, metrics = result
                self.buffer.put(
                    [Tagged(ep, _version(ep, flight.version), flight.actor) for ep in episodes]
                )
                self._chunk_metrics.append(metrics)

    def _next_in_queue_starts(self, actor: int) -> None:
        for flight in self.flights.values():
            if flight.actor == actor:
                if flight.started is None:
                    flight.started = time.monotonic()
                return

    def _wait_s(self) -> float:
        started = [f.started for f in self.flights.values() if f.started is not None]
        if not started:
            return self.opts.actor_timeout_s
        return max(0.1, self.opts.actor_timeout_s - (time.monotonic() - min(started)))

    def _abandon_overdue(self) -> None:
        now = time.monotonic()
        for ref, flight in list(self.flights.items()):
            overdue = (
                flight.started is not None and now - flight.started >= self.opts.actor_timeout_s
            )
            if overdue and self.flights.pop(ref, None) is not None:
                self.timeouts += 1
                self.ray.kill(self.actors[flight.actor], no_restart=False)
                self._lost(flight, f"actor {flight.actor} overran actor_timeout_s")
                self._ping(flight.actor)

    def _lost(self, flight: _Flight, why: str) -> None:
        """An actor died: every batch it held (in play or queued) is dropped whole and
        counts once; then the run goes on, or stops when too many deaths were seen."""
        queue = [ref for ref, f in self.flights.items() if f.actor == flight.actor]
        games = flight.games + sum(self.flights[ref].games for ref in queue)
        for ref in queue:
            del self.flights[ref]
        if games:  # a ping that failed lost nothing
            self.failures += 1
            self.games_lost += games
            self.log(f"{why}: its {games} games in flight are dropped")
        allowed = self.opts.num_actors * (self.opts.actor_max_restarts + 1)
        if self.failures > allowed or len(self.gone) == len(self.actors):
            raise ActorsFailedError(
                f"actors failed {self.failures} times (at most {allowed}: num_actors x "
                f"(actor_max_restarts + 1)); last: {why}. Check the actors' logs (memory, "
                "devices), raise actor_max_restarts or actor_timeout_s, and run again to resume"
            )

    # ----- shutdown ---------------------------------------------------------------------
    def close(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor, no_restart=True)
        self.actors, self.flights = [], {}
        if dropped := self.buffer.clear():
            self.log(f"{dropped} games left in the replay buffer are dropped (not checkpointed)")
        if self.owns_ray and self.ray.is_initialized():
            self.ray.shutdown()
        self.reaper.stop()

    def __enter__(self) -> AsyncCollector:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _version(episode: Episode, sent: int) -> int:
    """The version that played `episode`: its policy turns', or the batch's when the
    policy never moved (a game over before its first turn)."""
    found = episode_version(episode, POLICY)
    return sent if found < 0 else found


def _opponent(episode: Episode) -> str:
    """Whom the policy met in `episode`, as population play names it."""
    others = [label for label in episode.agents if label != POLICY]
    return others[0] if others else SELF
