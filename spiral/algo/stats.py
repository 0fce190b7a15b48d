"""Game statistics from raw returns and outcomes: win/draw/invalid rates, lengths.

These are computed from Episodes as they were scored, never from advantages: the
original Tinker port computed its win and draw rates after writing advantages over the
rewards, so draws were almost never counted as draws. Choices made here:

- **Who won**: `Episode.winner` when set; otherwise, for an invalid move, the seat that
  did not offend; otherwise, for a decisive ("win") outcome, the seat with the higher
  return. Draws and truncated games without a winner count as neither win nor loss, so
  win + loss + draw can be below 1 when games are truncated.
- **Per-seat rates** are reported only for seats played by `trained_agent`
  (`Episode.agents[seat]`): what the opponent did is not the policy's statistic.
- **Per game and overall** rates count every game regardless of who played.
- Keys are slash-namespaced: `<prefix>/<game>/seat<k>/win_rate`,
  `<prefix>/<game>/draw_rate`, `<prefix>/overall/invalid_rate`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from spiral.types import Episode, Seat


def winner_of(episode: Episode) -> Seat | None:
    """The winning seat, or None for a draw or an undecided (truncated) game."""
    if episode.winner is not None:
        return episode.winner
    if episode.outcome == "invalid" and episode.offender is not None:
        return 1 - episode.offender
    if episode.outcome == "win":
        r0, r1 = episode.returns
        if r0 != r1:
            return 0 if r0 > r1 else 1
    return None


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _seat_metrics(episodes: Sequence[Episode], seat: Seat) -> dict[str, float]:
    winners = [winner_of(e) for e in episodes]
    response_tokens = [
        float(len(t.completion.tokens))
        for e in episodes
        for t in e.seat_turns(seat)
        if t.completion is not None
    ]
    return {
        "win_rate": _mean([float(w == seat) for w in winners]),
        "loss_rate": _mean([float(w == 1 - seat) for w in winners]),
        "draw_rate": _mean([float(e.outcome == "draw") for e in episodes]),
        "invalid_rate": _mean([float(e.offender == seat) for e in episodes]),
        "mean_return": _mean([float(e.returns[seat]) for e in episodes]),
        "mean_response_tokens": _mean(response_tokens),
        "mean_turns": _mean([float(len(e.seat_turns(seat))) for e in episodes]),
        "num_games": float(len(episodes)),
    }


def _game_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    return {
        "draw_rate": _mean([float(e.outcome == "draw") for e in episodes]),
        "truncated_rate": _mean([float(e.outcome == "truncated") for e in episodes]),
        "invalid_rate": _mean([float(e.outcome == "invalid") for e in episodes]),
        "mean_game_length": _mean([float(len(e.turns)) for e in episodes]),
        "num_games": float(len(episodes)),
    }


def episode_metrics(
    episodes: Sequence[Episode], prefix: str = "train", trained_agent: str = "policy"
) -> dict[str, float]:
    """Per (game, seat) for the trained agent's seats, per game, and overall."""
    by_game: dict[str, list[Episode]] = defaultdict(list)
    for episode in episodes:
        by_game[episode.game_id].append(episode)

    metrics: dict[str, float] = {}
    for game_id, game_episodes in sorted(by_game.items()):
        for seat in (0, 1):
            played = [e for e in game_episodes if e.agents[seat] == trained_agent]
            if not played:
                continue
            for name, value in _seat_metrics(played, seat).items():
                metrics[f"{prefix}/{game_id}/seat{seat}/{name}"] = value
        for name, value in _game_metrics(game_episodes).items():
            metrics[f"{prefix}/{game_id}/{name}"] = value

    for name, value in _game_metrics(episodes).items():
        metrics[f"{prefix}/overall/{name}"] = value
    return metrics
