"""Role-conditioned advantage estimation (RAE): one moving baseline per (game, seat).

A finished game gives each seat a return R. The advantage of a seat is A = R - b, where
b is an exponential moving average of that (game, seat)'s past returns, read BEFORE it is
updated with this batch. The reward is counted exactly once: the original Tinker port
used 2R - b (step rewards plus a final reward of R - b); we do not.

Choices made here:

- **One update per batch per (game, seat), with the batch mean return**:
  b <- decay * b + (1 - decay) * mean(R over this batch's games for that game and seat).
  This is the Tinker port's semantics. It makes the result independent of the order in
  which games finish, which matters when many games advance together or producers push
  games asynchronously. The OAT original instead updated the EMA once per finished game,
  so the baseline a seat saw depended on completion order within the batch. Per-batch
  updates mean that every game in a batch is compared to the same baseline.
- **The initial value is 0.0** (the original's effective behaviour; its "first value
  initialises the EMA" branch was dead code). A missing (game, seat) reads as 0.0.
- **Only trained seats count.** A seat counts when it has at least one trainable turn
  (tokens sampled by a model) whose agent label is one we train on. Seats played by
  scripted or frozen opponents get no advantage and do not move the baseline; neither
  does a trained seat that never got to move (no turns, nothing to train).
- **use_baseline=False** gives A = R, but the baseline is still tracked and reported, so a
  run can switch it on later from a checkpoint without a cold start.
- Baselines are a value, checkpointed with `to_json` / `from_json` (the original kept
  them per process and lost them on restart). They also count their updates per key.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from spiral.types import Episode, Seat

BaselineKey = tuple[str, int]  # (game_id, seat)


@dataclass(frozen=True)
class Baselines:
    """Moving-average returns keyed by (game_id, seat); a missing key reads as 0.0.

    `counts` holds how many updates each key has had (kept with the checkpoint; one written
    before counts existed has none)."""

    values: Mapping[BaselineKey, float] = field(default_factory=dict)
    counts: Mapping[BaselineKey, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Copy into a read-only view so that a frozen Baselines cannot change under us.
        frozen = MappingProxyType({(str(g), int(s)): float(v) for (g, s), v in self.values.items()})
        object.__setattr__(self, "values", frozen)
        counts = MappingProxyType({(str(g), int(s)): int(n) for (g, s), n in self.counts.items()})
        object.__setattr__(self, "counts", counts)

    def get(self, game_id: str, seat: Seat) -> float:
        return self.values.get((game_id, seat), 0.0)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (a list of rows, because JSON keys cannot be tuples)."""
        rows = []
        for (game_id, seat), value in sorted(self.values.items()):
            row: dict[str, Any] = {"game_id": game_id, "seat": seat, "value": value}
            if (game_id, seat) in self.counts:
                row["count"] = self.counts[(game_id, seat)]
            rows.append(row)
        return {"baselines": rows}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> Baselines:
        """Inverse of `to_json`; also accepts the dict serialised to a JSON string."""
        parsed = json.loads(data) if isinstance(data, str) else data
        if "baselines" not in parsed:
            raise ValueError(
                "Baselines.from_json expects {'baselines': [{game_id, seat, value}, ...]} "
                f"as written by Baselines.to_json; got keys {sorted(parsed)}"
            )
        values = {
            (row["game_id"], int(row["seat"])): float(row["value"]) for row in parsed["baselines"]
        }
        counts = {
            (row["game_id"], int(row["seat"])): int(row["count"])
            for row in parsed["baselines"]
            if "count" in row
        }
        return cls(values, counts)


def _trained_seats(episode: Episode, trained_agents: Collection[str] | None) -> list[Seat]:
    """Seats with at least one trainable turn by an agent we train on."""
    seats = {
        turn.seat
        for turn in episode.turns
        if turn.trainable and (trained_agents is None or turn.agent in trained_agents)
    }
    return sorted(seats)


def rae_advantages(
    episodes: Sequence[Episode],
    baselines: Baselines,
    decay: float = 0.95,
    use_baseline: bool = True,
    trained_agents: Collection[str] | None = None,
) -> tuple[dict[tuple[int, int], float], Baselines, dict[str, float]]:
    """Advantages per (episode index, seat), the updated baselines, and metrics.

    Every advantage uses the baseline from before this batch's update. `trained_agents`
    names the agent labels (Turn.agent) whose sampled turns are trained on; None means
    every trainable turn, which would include a frozen checkpoint opponent's turns in
    fictitious self-play, so pass the policy's label there. Metrics per game and seat:
    `rae/<game>/seat<k>/baseline` (the EMA before), `.../baseline_used` (the mean of
    what was subtracted), `.../baseline_updated` (after), `.../mean_return`, `.../count`;
    overall `rae/mean_advantage` and `rae/num_seats`.
    """
    if not 0.0 < decay < 1.0:
        raise ValueError(f"RAE decay must satisfy 0 < decay < 1 (0.95 is usual), got {decay}")

    returns_by_key: dict[BaselineKey, list[tuple[tuple[int, int], float]]] = defaultdict(list)
    for index, episode in enumerate(episodes):
        for seat in _trained_seats(episode, trained_agents):
            ret = float(episode.returns[seat])
            if not math.isfinite(ret):
                raise ValueError(
                    f"episode {index} ({episode.game_id}, seed {episode.seed}) has a "
                    f"non-finite return {ret} for seat {seat}; fix the game's scoring"
                )
            returns_by_key[(episode.game_id, seat)].append(((index, seat), ret))

    advantages: dict[tuple[int, int], float] = {}
    new_values, new_counts = dict(baselines.values), dict(baselines.counts)
    metrics: dict[str, float] = {}
    for key, rows in sorted(returns_by_key.items()):
        before = baselines.get(*key)
        used = before if use_baseline else 0.0
        for (index, seat), ret in rows:
            advantages[(index, seat)] = ret - used
        mean_return = sum(r for _, r in rows) / len(rows)
        after = decay * before + (1.0 - decay) * mean_return
        new_values[key] = after
        new_counts[key] = baselines.counts.get(key, 0) + 1
        prefix = f"rae/{key[0]}/seat{key[1]}"
        metrics[f"{prefix}/baseline"] = before
        metrics[f"{prefix}/baseline_used"] = used
        metrics[f"{prefix}/baseline_updated"] = after
        metrics[f"{prefix}/mean_return"] = mean_return
        metrics[f"{prefix}/count"] = float(len(rows))

    metrics["rae/num_seats"] = float(len(advantages))
    metrics["rae/mean_advantage"] = (
        sum(advantages.values()) / len(advantages) if advantages else 0.0
    )
    return advantages, Baselines(new_values, new_counts), metrics


def turn_advantages(seat_advantage: float, n_turns: int, gamma: float = 1.0) -> list[float]:
    """Spread a seat's advantage over its n turns: A_i = A * gamma**(n - 1 - i).

    The last turn gets the full advantage; earlier turns are discounted (gamma = 1, the
    default, gives every turn the same advantage).
    """
    if n_turns < 0:
        raise ValueError(f"n_turns must be >= 0, got {n_turns}")
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"gamma must satisfy 0 < gamma <= 1, got {gamma}")
    return [seat_advantage * gamma ** (n_turns - 1 - i) for i in range(n_turns)]
