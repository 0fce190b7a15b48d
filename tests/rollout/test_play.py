"""The batched rollout with scripted agents: outcomes, invalid-move policy, draw retry."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from spiral.agents import make as make_agent
from spiral.agents.base import Agent
from spiral.games.base import State
from spiral.prompts.invalid import invalid_policy
from spiral.rollout.play import GameSpec, derive_seed, is_draw, play_games, play_with_draw_retry
from spiral.types import Move, ParseFailure, ParseResult, Turn


class CountingAgent(Agent):
    """Random moves; records how many states each call received (to check batching)."""

    def __init__(self, seed: int) -> None:
        self.inner = make_agent("random", seed=seed)
        self.calls: list[int] = []
        self.name = "counting"

    def act(self, state: State) -> Move:
        return self.inner.act(state)

    def act_many(self, states: Sequence[State]) -> list[Move]:
        self.calls.append(len(states))
        return [self.act(s) for s in states]


class Blunderer(Agent):
    """Always answers with text that is no move: every turn is a parse failure."""

    name = "blunderer"

    def act(self, state: State) -> Move:
        raise AssertionError("not used")

    def take_turns(self, states: Sequence[State], seed: int) -> list[Turn]:
        return [
            Turn(
                s.game_id,
                s.current_player(),
                self.name,
                "",
                parse=ParseResult(None, ParseFailure("no_answer")),
            )
            for s in states
        ]


def test_one_call_per_player_per_wave() -> None:
    agent = CountingAgent(seed=1)
    specs = [GameSpec("TicTacToe-v0", seed=i, seats=("a", "a")) for i in range(32)]
    episodes = play_games(specs, {"a": agent}, invalid_policy("spiral"), seed=3)
    assert len(episodes) == 32
    # The first wave holds every game; no call is ever larger than the number of games.
    assert agent.calls[0] == 32 and max(agent.calls) == 32
    # TicTacToe lasts at most 9 moves, so at most 9 waves.
    assert len(agent.calls) <= 9
    for ep in episodes:
        assert ep.returns[0] == -ep.returns[1]
        assert ep.outcome in ("win", "draw")
        assert len(ep.turns) == len(ep.moves)


class JointRecorder(CountingAgent):
    """A joint agent: records each call's seat labels; labels its turns with them."""

    joint = True

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.label_calls: list[list[str]] = []

    def take_turns_as(
        self, labels: Sequence[str], states: Sequence[State], seed: int
    ) -> list[Turn]:
        self.label_calls.append(list(labels))
        turns = self.take_turns(states, seed)
        return [dataclasses.replace(t, agent=label) for t, label in zip(turns, labels, strict=True)]


def test_labels_bound_to_one_joint_agent_share_each_wave_call() -> None:
    joint, solo = JointRecorder(seed=1), CountingAgent(seed=2)
    seats = [("p", "m1"), ("m2", "p"), ("p", "s"), ("s", "m1")]
    specs = [GameSpec("TicTacToe-v0", seed=i, seats=seats[i % 4]) for i in range(16)]
    players = {"p": joint, "m1": joint, "m2": joint, "s": solo}
    episodes = play_games(specs, players, invalid_policy("spiral"), seed=3)
    # Wave 0: seat 0 moves everywhere; p (8 games) and m2 (4) are one call, s (4) its own.
    assert sorted(joint.label_calls[0]) == ["m2"] * 4 + ["p"] * 8
    assert solo.calls[0] == 4
    # Every joint turn carries the seat label it was played under.
    joint_turns = [(t, ep) for ep in episodes for t in ep.turns if ep.agents[t.seat] != "s"]
    assert joint_turns and all(t.agent == ep.agents[t.seat] for t, ep in joint_turns)
    # A non-joint agent bound to two labels still gets one call per label.
    twice = CountingAgent(seed=4)
    play_games(specs[:4], {"p": twice, "m1": twice, "m2": twice, "s": twice},
               invalid_policy("spiral"), seed=3)  # fmt: skip
    assert twice.calls[:3] == [1, 2, 1]  # wave 0: m2 (game 1), p (games 0, 2), s (game 3)


def test_invalid_move_ends_game_with_declared_policy() -> None:
    specs = [GameSpec("TicTacToe-v0", seed=0, seats=("bad", "rand"))]
    players = {"bad": Blunderer(), "rand": make_agent("random", seed=0)}
    (ep,) = play_games(specs, players, invalid_policy("spiral"))
    assert ep.outcome == "invalid" and ep.offender == 0 and ep.winner == 1
    assert ep.returns == (-1.5, 0.5)
    specs = [GameSpec("TicTacToe-v0", seed=0, seats=("rand", "bad"))]
    (ep,) = play_games(specs, players, invalid_policy("strict"))
    assert ep.offender == 1 and ep.returns == (1.0, -1.0) and len(ep.moves) == 1


def test_minimax_never_loses_in_batched_rollout() -> None:
    specs = [GameSpec("TicTacToe-v0", seed=i, seats=("opt", "rand")) for i in range(200)]
    players = {
        "opt": make_agent("optimal", game_id="TicTacToe-v0", seed=1),
        "rand": make_agent("random", seed=2),
    }
    episodes = play_games(specs, players, invalid_policy("spiral"))
    assert all(ep.winner != 1 for ep in episodes)
    assert sum(ep.winner == 0 for ep in episodes) / len(episodes) > 0.9


def test_draw_retry_replaces_draws() -> None:
    # Optimal vs optimal TicTacToe always draws: every game is re-played, and kept as a draw.
    players = {"opt": make_agent("optimal", game_id="TicTacToe-v0", seed=1)}
    specs = [GameSpec("TicTacToe-v0", seed=i, seats=("opt", "opt")) for i in range(4)]
    episodes, metrics = play_with_draw_retry(
        specs, players, invalid_policy("spiral"), max_retries=2
    )
    assert all(is_draw(ep) for ep in episodes)
    assert metrics["rollout/draw_replays"] == 8 and metrics["rollout/draws_kept"] == 4
    # Random play: retries turn most draws into decisive games.
    rand = {"r": make_agent("random", seed=5)}
    specs = [GameSpec("TicTacToe-v0", seed=i, seats=("r", "r")) for i in range(100)]
    plain = play_games(specs, rand, invalid_policy("spiral"))
    retried, _ = play_with_draw_retry(
        specs, {"r": make_agent("random", seed=5)}, invalid_policy("spiral"), max_retries=3
    )
    assert sum(map(is_draw, retried)) < sum(map(is_draw, plain))


def test_same_seed_same_games() -> None:
    def run() -> list[tuple[str, ...]]:
        specs = [GameSpec("KuhnPoker-v1", seed=i, seats=("r", "r")) for i in range(20)]
        eps = play_games(
            specs, {"r": make_agent("random", seed=9)}, invalid_policy("spiral"), seed=1
        )
        return [ep.moves for ep in eps]

    assert run() == run()
    assert derive_seed(1, 2) != derive_seed(2, 1)
