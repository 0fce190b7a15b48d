"""Play many games at once: every wave of pending turns is one batched call per player.

All live games advance together. In each wave the games are grouped by the player whose
seat is to move, and each player gets ONE `take_turns` call for its whole group (for a
model-backed player that is one batched sampler call); seat labels bound to one joint
agent (the policy and its pool members, adapters of one model) share one call. A turn whose text did not parse
to a legal move, or whose move the game rejected when played (free-form moves are judged
then), ends its game under the declared invalid-move policy; the state's own
rules decide every other ending (turn limits included). Nothing here knows about
training: the same function serves self-play, population play and evaluation.
`play_with_draw_retry` re-plays drawn games with fresh seeds (`filter_draw`), draws
read from the outcomes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from spiral import games
from spiral.agents.base import Agent
from spiral.games.base import IllegalMoveError, State
from spiral.prompts.invalid import InvalidMovePolicy
from spiral.types import Episode, Outcome, ParseFailure, ParseResult, Turn

_MIX = 1_000_003  # odd multiplier for deriving per-wave seeds from a base seed


@dataclass(frozen=True)
class GameSpec:
    """One game to play: which game, which seed, which player label sits in each seat."""

    game_id: str
    seed: int
    seats: tuple[str, str]
    params: Mapping[str, Any] = field(default_factory=dict)


def derive_seed(*parts: int) -> int:
    """A stable 63-bit seed from integers (Python's hash of ints is not randomised, but
    we avoid relying on it and mix explicitly)."""
    value = 0x5EED
    for part in parts:
        value = (value * _MIX + int(part) + 0x9E3779B9) % (1 << 63)
    return value


def _outcome(state: State) -> Outcome:
    if state.truncated():
        return "truncated"
    return "draw" if state.winner() is None else "win"


def _finish(
    spec: GameSpec,
    state: State,
    turns: list[Turn],
    invalid: InvalidMovePolicy | None,
    offender: int | None,
) -> Episode:
    winner: int | None
    if offender is not None and invalid is not None:
        returns = list(invalid.returns(offender))
        outcome: Outcome = "invalid"
        winner = 1 - offender
    else:
        r0, r1 = state.returns()
        returns = [r0, r1]
        outcome = _outcome(state)
        winner = state.winner()
    return Episode(
        game_id=spec.game_id,
        seed=spec.seed,
        turns=tuple(turns),
        returns=(float(returns[0]), float(returns[1])),
        outcome=outcome,
        winner=winner,
        offender=offender,
        agents=spec.seats,
        moves=tuple(move for _, move in state.move_history),
    )


def play_games(
    specs: Sequence[GameSpec],
    players: Mapping[str, Agent],
    invalid: InvalidMovePolicy,
    seed: int = 0,
) -> list[Episode]:
    """Play every game in `specs` to the end; episodes come back in the order of `specs`."""
    missing = {label for s in specs for label in s.seats} - set(players)
    if missing:
        raise KeyError(f"no player for seat labels {sorted(missing)}; have {sorted(players)}")
    labels = sorted(players)
    states = [games.make(s.game_id, seed=s.seed, **dict(s.params)) for s in specs]
    turns: list[list[Turn]] = [[] for _ in specs]
    episodes: list[Episode | None] = [None] * len(specs)
    wave = 0
    while True:
        live = [i for i, ep in enumerate(episodes) if ep is None]
        for i in live:
            if states[i].is_terminal():
                episodes[i] = _finish(specs[i], states[i], turns[i], invalid, None)
        live = [i for i in live if episodes[i] is None]
        if not live:
            break
        groups: dict[str, list[int]] = {}
        for i in live:
            groups.setdefault(specs[i].seats[states[i].current_player()], []).append(i)
        for first, idxs, seat_labels in _calls(groups, players):
            wave_seed = derive_seed(seed, wave, labels.index(first))
            agent, wave_states = players[first], [states[i] for i in idxs]
            if agent.joint:
                new_turns = agent.take_turns_as(seat_labels, wave_states, wave_seed)
            else:
                new_turns = agent.take_turns(wave_states, wave_seed)
            for i, turn in zip(idxs, new_turns, strict=True):
                turn = _applied(states[i], turn)
                turns[i].append(turn)
                if turn.move is None:
                    episodes[i] = _finish(specs[i], states[i], turns[i], invalid, turn.seat)
        wave += 1
    return [ep for ep in episodes if ep is not None]


def _applied(state: State, turn: Turn) -> Turn:
    """Play `turn`'s move; a move the game itself rejects (a game that takes free-form
    moves judges them only when they are played) comes back as the turn's parse failure,
    so it ends the game as any illegal answer does."""
    move = turn.move
    if move is None:
        return turn
    try:
        state.apply_action(move)
    except IllegalMoveError as err:
        rejected = ParseFailure("not_legal", str(err).splitlines()[0] if str(err) else "")
        return replace(turn, parse=ParseResult(move=None, failure=rejected, answer=move))
    return turn


def _calls(
    groups: Mapping[str, list[int]], players: Mapping[str, Agent]
) -> list[tuple[str, list[int], list[str]]]:
    """A wave's calls: one per seat label, except that labels bound to one joint agent
    share a call. Each call: its first label, its games, each game's seat label."""
    calls: dict[object, tuple[str, list[int], list[str]]] = {}
    for label, idxs in sorted(groups.items()):
        agent = players[label]
        key = id(agent) if agent.joint else label
        _, games_, seat_labels = calls.setdefault(key, (label, [], []))
        games_.extend(idxs)
        seat_labels.extend([label] * len(idxs))
    return list(calls.values())


def is_draw(episode: Episode) -> bool:
    """A draw by raw outcome (never by advantages, unlike the original's retry check)."""
    return episode.outcome in ("draw", "truncated")


def play_with_draw_retry(
    specs: Sequence[GameSpec],
    players: Mapping[str, Agent],
    invalid: InvalidMovePolicy,
    seed: int = 0,
    max_retries: int = 0,
) -> tuple[list[Episode], dict[str, float]]:
    """`play_games`, then re-play drawn games with fresh seeds up to `max_retries` times.

    A draw still drawn after the last retry is kept. Returns the episodes (in spec order)
    and metrics: how many games were re-played and how many draws were kept.
    """
    episodes = play_games(specs, players, invalid, seed)
    replayed = 0
    for retry in range(1, max_retries + 1):
        drawn = [i for i, ep in enumerate(episodes) if is_draw(ep)]
        if not drawn:
            break
        redo = [
            GameSpec(
                specs[i].game_id, derive_seed(specs[i].seed, retry), specs[i].seats, specs[i].params
            )
            for i in drawn
        ]
        replayed += len(redo)
        for i, ep in zip(
            drawn, play_games(redo, players, invalid, derive_seed(seed, retry)), strict=True
        ):
            episodes[i] = ep
    kept = sum(is_draw(ep) for ep in episodes)
    return episodes, {"rollout/draw_replays": float(replayed), "rollout/draws_kept": float(kept)}
