"""episode_metrics: rates from raw outcomes on a hand-built batch of games."""

from __future__ import annotations

import pytest

from spiral.algo.stats import episode_metrics, winner_of
from spiral.types import Completion, Episode, Outcome, Turn

TTT = "TicTacToe-v0"
KUHN = "KuhnPoker-v1"


def _turn(game: str, seat: int, n_tokens: int | None, agent: str = "policy") -> Turn:
    completion = None
    if n_tokens is not None:
        completion = Completion(tuple(range(n_tokens)), (-0.1,) * n_tokens, "eos", "t")
    return Turn(game, seat, agent, "obs", (1,), completion)


def _ep(
    game: str,
    outcome: Outcome,
    returns: tuple[float, float],
    tokens: list[tuple[int, int | None]],
    winner: int | None = None,
    offender: int | None = None,
    agents: tuple[str, str] = ("policy", "policy"),
) -> Episode:
    turns = tuple(_turn(game, seat, n, agents[seat]) for seat, n in tokens)
    return Episode(game, 0, turns, returns, outcome, winner, offender, agents)


BATCH = [
    _ep(TTT, "win", (1, -1), [(0, 4), (1, 2), (0, 6)], winner=0),
    _ep(TTT, "draw", (0, 0), [(0, 2), (1, 4)]),
    _ep(TTT, "invalid", (0.5, -1.5), [(0, 3), (1, 5)], offender=1),  # winner left unset
    _ep(TTT, "truncated", (0, 0), [(0, 1), (1, None)], agents=("policy", "random")),
    _ep(KUHN, "win", (-2, 2), [(0, 2), (1, 2)]),  # winner from the returns
]


def test_seat_metrics_for_the_trained_agent() -> None:
    m = episode_metrics(BATCH)
    s0 = f"train/{TTT}/seat0"
    assert m[f"{s0}/win_rate"] == pytest.approx(2 / 4)
    assert m[f"{s0}/loss_rate"] == 0.0
    assert m[f"{s0}/draw_rate"] == pytest.approx(1 / 4)
    assert m[f"{s0}/invalid_rate"] == 0.0
    assert m[f"{s0}/mean_return"] == pytest.approx(1.5 / 4)
    assert m[f"{s0}/mean_response_tokens"] == pytest.approx((4 + 6 + 2 + 3 + 1) / 5)
    assert m[f"{s0}/mean_turns"] == pytest.approx(5 / 4)
    # Seat 1 was played by the policy in three TicTacToe games (random in the fourth).
    s1 = f"train/{TTT}/seat1"
    assert m[f"{s1}/num_games"] == 3.0
    assert m[f"{s1}/win_rate"] == 0.0
    assert m[f"{s1}/loss_rate"] == pytest.approx(2 / 3)
    assert m[f"{s1}/draw_rate"] == pytest.approx(1 / 3)
    assert m[f"{s1}/invalid_rate"] == pytest.approx(1 / 3)
    assert m[f"{s1}/mean_return"] == pytest.approx(-2.5 / 3)
    assert m[f"{s1}/mean_response_tokens"] == pytest.approx(11 / 3)
    assert m[f"train/{KUHN}/seat0/loss_rate"] == 1.0
    assert m[f"train/{KUHN}/seat1/win_rate"] == 1.0


def test_game_and_overall_metrics() -> None:
    m = episode_metrics(BATCH, prefix="eval")
    g = f"eval/{TTT}"
    assert m[f"{g}/draw_rate"] == pytest.approx(0.25)
    assert m[f"{g}/truncated_rate"] == pytest.approx(0.25)
    assert m[f"{g}/invalid_rate"] == pytest.approx(0.25)
    assert m[f"{g}/mean_game_length"] == pytest.approx(9 / 4)
    assert m[f"{g}/num_games"] == 4.0
    assert m["eval/overall/num_games"] == 5.0
    assert m["eval/overall/draw_rate"] == pytest.approx(1 / 5)
    assert m["eval/overall/invalid_rate"] == pytest.approx(1 / 5)
    assert not any(key.startswith("train/") for key in m)


def test_only_seats_of_the_named_agent() -> None:
    m = episode_metrics(BATCH, trained_agent="random")
    seat_keys = {k for k in m if "/seat" in k}
    assert seat_keys and all(k.startswith(f"train/{TTT}/seat1/") for k in seat_keys)
    assert m[f"train/{TTT}/seat1/loss_rate"] == 0.0  # truncated: neither win nor loss
    assert m[f"train/{TTT}/seat1/mean_response_tokens"] == 0.0  # scripted: no tokens


def test_winner_of() -> None:
    assert [winner_of(e) for e in BATCH] == [0, None, 0, None, 1]


def test_empty_batch() -> None:
    assert episode_metrics([]) == {
        "train/overall/draw_rate": 0.0,
        "train/overall/truncated_rate": 0.0,
        "train/overall/invalid_rate": 0.0,
        "train/overall/mean_game_length": 0.0,
        "train/overall/num_games": 0.0,
    }
