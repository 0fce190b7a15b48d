"""The mixture of a run's stored iterates as one player: one member drawn per game.

Self-play's last iterate circles an equilibrium; the average of the iterates is what
converges (fictitious play's guarantee, CFR's average strategy). The converging deep
methods read the average without training an average network: they keep the iterates and
draw one per game (SD-CFR's and DREAM's "single" policy), which plays exactly the
average policy. `MixturePolicy` does that with a run's checkpoints: each game is played
throughout by the member its seed draws (uniformly), so both seats of one deal meet the
same member and a resumed or repeated evaluation draws the same members. Its exact
exploitability is that of the members' reach-weighted average table
(`spiral/evaluation/mixture.py`).

`mixture_checkpoints` picks the members: a run's complete checkpoints from a step on.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from spiral.agents.base import Agent
from spiral.agents.model_agent import CheckpointNotFound, CheckpointPolicy, list_checkpoints
from spiral.games.base import State
from spiral.types import Move, Turn

SALT = 0x6D1C  # keeps the member draw apart from the game's own use of its seed


def mixture_checkpoints(
    run_dir: Path, first_step: int | None = None, last_step: int | None = None
) -> list[Path]:
    """The run's complete checkpoints from `first_step` (None: the later half of them) to
    `last_step` (None: the newest), oldest first; one line if there are none."""
    found = [(s, f) for s, f in list_checkpoints(run_dir) if last_step is None or s <= last_step]
    if not found:
        raise CheckpointNotFound(
            f"{run_dir} has no complete checkpoint to mix; weights=mixture takes a run folder "
            "(checkpoint=RUN) whose training saved checkpoints (save_every)"
        )
    if first_step is None:
        first_step = found[len(found) // 2][0]
    chosen = [folder for step, folder in found if step >= first_step]
    if not chosen:
        raise CheckpointNotFound(
            f"{run_dir} has no checkpoint at or after step {first_step} (its steps: "
            f"{', '.join(str(s) for s, _ in found)}); lower mixture_from"
        )
    return chosen


class MixturePolicy(Agent):
    """Plays each game with one member, drawn by the game's seed (uniform weights)."""

    def __init__(self, members: Sequence[CheckpointPolicy], name: str) -> None:
        if not members:
            raise ValueError("a mixture needs at least one member")
        self.members = list(members)
        self.name = name
        newest = self.members[-1]
        self.params, self.spec, self.source = newest.params, newest.spec, newest.source

    def member_index(self, state: State) -> int:
        return random.Random(state.seed ^ SALT).randrange(len(self.members))

    def act(self, state: State) -> Move:
        return self.members[self.member_index(state)].act(state)

    def take_turns(self, states: Sequence[State], seed: int) -> list[Turn]:
        """Each member plays its games of the wave in one batched call, from a sampling
        seed of its own (members' draws are not the same random numbers)."""
        turns: list[Turn | None] = [None] * len(states)
        groups: dict[int, list[int]] = {}
        for i, state in enumerate(states):
            groups.setdefault(self.member_index(state), []).append(i)
        for k, rows in sorted(groups.items()):
            member_seed = random.Random(seed * 1_000_003 + k).randrange(2**31)
            played = self.members[k].take_turns([states[i] for i in rows], member_seed)
            for i, turn in zip(rows, played, strict=True):
                turns[i] = turn
        assert all(t is not None for t in turns)  # every state went to one member
        return turns  # type: ignore[return-value]
