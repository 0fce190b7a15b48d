"""The replay buffer of the asynchronous actor-learner: finished games, tagged with the
policy version that played them, waiting for the learner.

A plain bounded FIFO of `Episode`s (values, no locks: only the learner's process touches
it; actors hand their games to the learner, which puts them here). Choices:

- **Staleness is measured in policy versions** (the learner's optimizer steps), as the
  original's `replay_buffer_max_staleness` (default 5): a game played by version v is
  trained on at learner version V only if V - v <= max_staleness. Older games are dropped,
  never trained on, and counted (`replay_buffer/dropped_stale`).
- **A game's version is the policy's**: every turn the trained policy sampled in one game
  carries the same version, because actors take new weights between batches of games,
  never mid-game. A game whose policy turns disagree is refused (it would be a bug).
- **Oldest first**: `take` hands out the oldest fresh games, so no game waits while newer
  ones overtake it (a FIFO bounds every game's age by the buffer's turnover).
- **Bounded**: `capacity` games at most; `room()` tells the learner how many more games it
  may ask the actors for (back-pressure: actors are not sent work the buffer cannot hold,
  rather than games being thrown away unseen).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from spiral.types import Episode


def episode_version(episode: Episode, agent: str) -> int:
    """The policy version that played `episode` (its turns by `agent`); -1 if the agent
    never moved in it (no turn to train on, never stale)."""
    versions = {t.policy_version for t in episode.turns if t.agent == agent and t.completion}
    if len(versions) > 1:
        raise ValueError(
            f"episode {episode.game_id} seed {episode.seed} mixes policy versions "
            f"{sorted(versions)}: an actor changed weights mid-game"
        )
    return versions.pop() if versions else -1


@dataclass(frozen=True)
class Tagged:
    """A game in the buffer: the episode, the version that played it, where it came from."""

    episode: Episode
    version: int
    actor: int = 0


class ReplayBuffer:
    """Bounded FIFO of tagged games; `take` drops what is too stale and returns the rest."""

    def __init__(self, capacity: int, max_staleness: int) -> None:
        if capacity <= 0:
            raise ValueError(f"replay buffer capacity must be > 0, got {capacity}")
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
        self.capacity = capacity
        self.max_staleness = max_staleness
        self._items: deque[Tagged] = deque()
        self.dropped_stale = 0  # games dropped for age, over the buffer's life
        self.added = 0

    def __len__(self) -> int:
        return len(self._items)

    def room(self) -> int:
        return self.capacity - len(self._items)

    def put(self, items: Sequence[Tagged]) -> None:
        if len(items) > self.room():
            raise OverflowError(
                f"{len(items)} games do not fit ({len(self._items)} of {self.capacity} held); "
                "ask the actors for at most room() games"
            )
        self._items.extend(items)
        self.added += len(items)

    def drop_stale(self, version: int) -> int:
        """Remove every game older than `version - max_staleness`; how many went."""
        keep = [t for t in self._items if version - t.version <= self.max_staleness]
        dropped = len(self._items) - len(keep)
        self._items = deque(keep)
        self.dropped_stale += dropped
        return dropped

    def fresh(self, version: int) -> int:
        """How many games are fresh enough to be trained on at learner `version`."""
        return sum(1 for t in self._items if version - t.version <= self.max_staleness)

    def take(self, n: int, version: int) -> list[Tagged]:
        """The `n` oldest fresh games (fewer if not held), after dropping stale ones."""
        self.drop_stale(version)
        taken = [self._items.popleft() for _ in range(min(n, len(self._items)))]
        return taken

    def clear(self) -> int:
        n = len(self._items)
        self._items.clear()
        return n

    def stats(self, version: int) -> dict[str, float]:
        """`replay_buffer/*` metrics (the original's names): size and ages in versions."""
        ages = [version - t.version for t in self._items]
        return {
            "replay_buffer/size": float(len(ages)),
            "replay_buffer/oldest_age": float(max(ages)) if ages else 0.0,
            "replay_buffer/newest_age": float(min(ages)) if ages else 0.0,
            "replay_buffer/mean_age": sum(ages) / len(ages) if ages else 0.0,
            "replay_buffer/dropped_stale": float(self.dropped_stale),
            "replay_buffer/added": float(self.added),
        }
