"""The Agent protocol: something that chooses a move for the seat to move.

Scripted agents (random, optimal) read the game State, never the prompt text. Model-backed
agents (the LLM policy, checkpoints, API models) are also Agents, so evaluation can seat
anything against anything; the rollout layer batches the model-backed ones.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from spiral.games.base import State
from spiral.types import Move, ParseResult, Turn


class Agent(ABC):
    """Chooses moves. `act` gets a state where it is this agent's turn; it must not mutate it."""

    name: str = "agent"
    # True: several seat labels may be bound to this one agent, and a wave's turns for all
    # of them come in one `take_turns_as` call (population play: the policy and its pool
    # members are adapters of one model, sampled in one batch).
    joint: bool = False

    @abstractmethod
    def act(self, state: State) -> Move:
        """A legal move for `state.current_player()`."""

    def act_many(self, states: Sequence[State]) -> list[Move]:
        """One move per state. Model-backed agents override this to batch."""
        return [self.act(s) for s in states]

    def take_turns(self, states: Sequence[State], seed: int) -> list[Turn]:
        """One Turn per state (the rollout's entry point). `seed` varies per wave so
        sampling agents can be deterministic; scripted agents use their own RNG."""
        del seed
        moves = self.act_many(states)
        return [
            Turn(
                game_id=s.game_id,
                seat=s.current_player(),
                agent=self.name,
                observation=s.observation(s.current_player()),
                parse=ParseResult(move=m, answer=m),
            )
            for s, m in zip(states, moves, strict=True)
        ]

    def reseed(self, seed: int) -> None:
        """Restart this agent's own randomness (scripted agents keep a `random.Random` in
        `rng`), so that a run resumed at a step replays that step's moves exactly."""
        rng = getattr(self, "rng", None)
        if rng is not None:
            rng.seed(seed)

    def take_turns_as(
        self, labels: Sequence[str], states: Sequence[State], seed: int
    ) -> list[Turn]:
        """Turns for `states`, state i played under seat label `labels[i]` (joint agents)."""
        raise NotImplementedError(f"{type(self).__name__} plays one seat label")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
