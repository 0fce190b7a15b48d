"""Head-to-head evaluation: a candidate agent against opponents, both seats equally.

For every (game, opponent, seat of the candidate) we play `games_per_seat` seeded games
through the same batched rollout as training and report win / draw / loss / invalid
rates with 95% Wilson intervals, the candidate's mean return with a 95% interval (chips in
the poker games, where a win says little of how much), mean game length and mean response
length (tokens).
Seeds are derived from `seed`, so an evaluation is reproducible and two checkpoints
evaluated with the same seed face the same deals and dice.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from spiral.agents.base import Agent
from spiral.evaluation.intervals import mean_ci, wilson_interval
from spiral.prompts.invalid import InvalidMovePolicy
from spiral.rollout.play import GameSpec, derive_seed, play_games
from spiral.types import Episode

CANDIDATE = "candidate"


@dataclass(frozen=True)
class MatchResult:
    """Outcomes of the candidate in one seat of one game against one opponent."""

    game_id: str
    opponent: str
    seat: int
    wins: int
    draws: int
    losses: int
    invalid: int  # games the candidate lost by an invalid move (also counted in losses)
    opponent_invalid: int
    games: int
    mean_game_length: float
    mean_response_tokens: float
    seeds: tuple[int, ...]
    mean_return: float = math.nan  # the candidate's; chips in the poker games; nan: unknown
    return_low: float = -math.inf  # with fewer than two games the spread is unknown
    return_high: float = math.inf

    def rate(self, count: int) -> tuple[float, float, float]:
        low, high = wilson_interval(count, self.games)
        return (count / self.games if self.games else 0.0, low, high)

    def metrics(self, prefix: str = "eval") -> dict[str, float]:
        key = f"{prefix}/{self.game_id}/{self.opponent}/seat{self.seat}"
        out: dict[str, float] = {}
        for name, count in (
            ("win_rate", self.wins),
            ("draw_rate", self.draws),
            ("loss_rate", self.losses),
            ("invalid_rate", self.invalid),
        ):
            value, low, high = self.rate(count)
            out[f"{key}/{name}"] = value
            out[f"{key}/{name}_low"] = low
            out[f"{key}/{name}_high"] = high
        if math.isfinite(self.mean_return):
            out[f"{key}/mean_return"] = self.mean_return
        if math.isfinite(self.return_low) and math.isfinite(self.return_high):
            out[f"{key}/mean_return_low"] = self.return_low
            out[f"{key}/mean_return_high"] = self.return_high
        out[f"{key}/games"] = float(self.games)
        out[f"{key}/mean_game_length"] = self.mean_game_length
        out[f"{key}/mean_response_tokens"] = self.mean_response_tokens
        return out


def summarize(game_id: str, opponent: str, seat: int, episodes: Sequence[Episode]) -> MatchResult:
    """Count the candidate's outcomes in `seat` over `episodes`."""
    wins = sum(ep.winner == seat for ep in episodes)
    losses = sum(ep.winner == 1 - seat for ep in episodes)
    tokens = [
        len(t.completion.tokens)
        for ep in episodes
        for t in ep.turns
        if t.seat == seat and t.completion
    ]
    mean, low, high = mean_ci(ep.returns[seat] for ep in episodes)
    return MatchResult(
        game_id=game_id,
        opponent=opponent,
        seat=seat,
        wins=wins,
        draws=len(episodes) - wins - losses,
        losses=losses,
        invalid=sum(ep.offender == seat for ep in episodes),
        opponent_invalid=sum(ep.offender == 1 - seat for ep in episodes),
        games=len(episodes),
        mean_game_length=sum(len(ep.moves) for ep in episodes) / max(1, len(episodes)),
        mean_response_tokens=sum(tokens) / max(1, len(tokens)),
        seeds=tuple(ep.seed for ep in episodes),
        mean_return=mean,
        return_low=low,
        return_high=high,
    )


def evaluate(
    candidate: Agent,
    opponents: Mapping[str, Agent],
    game_ids: Sequence[str],
    games_per_seat: int,
    invalid: InvalidMovePolicy,
    seed: int = 0,
    game_params: Mapping[str, object] | None = None,
) -> tuple[list[MatchResult], list[Episode]]:
    """Play the candidate against each opponent in both seats of each game.

    All matchups are played together (one rollout), so a model-backed candidate gets one
    batched call per wave across every game and opponent.
    """
    specs: list[GameSpec] = []
    keys: list[tuple[str, str, int]] = []
    for g, game_id in enumerate(game_ids):
        for o, name in enumerate(sorted(opponents)):
            for seat in (0, 1):
                seats = (CANDIDATE, name) if seat == 0 else (name, CANDIDATE)
                for k in range(games_per_seat):
                    # Same deal for both seats of a pairing: seat is not in the seed.
                    game_seed = derive_seed(seed, g, o, k)
                    specs.append(GameSpec(game_id, game_seed, seats, dict(game_params or {})))
                    keys.append((game_id, name, seat))
    players: dict[str, Agent] = {CANDIDATE: candidate, **opponents}
    episodes = play_games(specs, players, invalid, seed=derive_seed(seed, 7))
    grouped: dict[tuple[str, str, int], list[Episode]] = {}
    for key, ep in zip(keys, episodes, strict=True):
        grouped.setdefault(key, []).append(ep)
    results = [summarize(g, o, s, eps) for (g, o, s), eps in grouped.items()]
    return results, episodes


def results_metrics(results: Sequence[MatchResult], prefix: str = "eval") -> dict[str, float]:
    out: dict[str, float] = {}
    for r in results:
        out.update(r.metrics(prefix))
    return out


def results_table(results: Sequence[MatchResult]) -> str:
    """A fixed-width table: one row per (game, opponent, seat)."""
    head = f"{'game':<22}{'opponent':<14}{'seat':>4}  {'win':<20}{'draw':<20}{'loss':<20}{'invalid':<20}{'n':>5}"
    rows = [head, "-" * len(head)]
    for r in sorted(results, key=lambda r: (r.game_id, r.opponent, r.seat)):
        cells = []
        for count in (r.wins, r.draws, r.losses, r.invalid):
            v, lo, hi = r.rate(count)
            cells.append(f"{v:.2f} [{lo:.2f},{hi:.2f}]".ljust(20))
        rows.append(f"{r.game_id:<22}{r.opponent:<14}{r.seat:>4}  {''.join(cells)}{r.games:>5}")
    return "\n".join(rows)
