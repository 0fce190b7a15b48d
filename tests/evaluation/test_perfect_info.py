"""Exact TicTacToe exploitability by search, against numbers known independently.

The uniform random policy's numbers were computed by OpenSpiel's `exploitability.nash_conv`
on tic_tac_toe (294,778 information states), and agree with the known values in
docs/games.md ("TicTacToe"): a best response to random wins 191/192 as first
mover and nets 93.44% - 0.95% as second; random vs random nets 58.49% - 28.81% for the
first mover."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from spiral.agents.minimax import optimal_cells
from spiral.analysis.perfect_info import (
    Position,
    decisions,
    exploitability,
    game_positions,
    policy_report,
)
from spiral.games import make
from spiral.games.base import State
from spiral.types import Move, Seat


def _board_key(state: State) -> tuple[tuple[int, ...], bool]:
    return state.board, state.is_terminal()  # type: ignore[attr-defined]


def _uniform(positions: Sequence[tuple[State, Seat]]) -> list[dict[Move, float]]:
    return [{m: 1 / len(s.legal_actions()) for m in s.legal_actions()} for s, _ in positions]


def _minimax(positions: Sequence[tuple[State, Seat]]) -> list[dict[Move, float]]:
    out = []
    for state, seat in positions:
        cells = optimal_cells(state.board, seat)  # type: ignore[attr-defined]
        out.append({f"[{c}]": 1 / len(cells) for c in cells})
    return out


@pytest.fixture(scope="module")
def positions() -> dict[object, Position]:
    return game_positions(make("TicTacToe-v0"), _board_key)


def _report(positions: dict[object, Position], dists) -> dict[str, float]:  # type: ignore[no-untyped-def]
    keys = decisions(positions)
    found = dists([(positions[k].state, positions[k].seat) for k in keys])
    return policy_report(
        positions, _board_key(make("TicTacToe-v0")), dict(zip(keys, found, strict=True))
    )


def test_the_graph_has_every_tictactoe_position(positions: dict[object, Position]) -> None:
    assert len(positions) == 5478  # legal positions, the empty board included
    assert sum(p.seat is not None for p in positions.values()) == 4520


def test_uniform_random_matches_openspiel() -> None:
    report = exploitability(make("TicTacToe-v0"), _board_key, _uniform)  # the whole path
    assert report["exploitability"] == pytest.approx(0.9598296957671957, abs=1e-12)
    assert report["nash_conv"] == pytest.approx(1.9196593915343914, abs=1e-12)
    assert report["br_value_seat0"] == pytest.approx(191 / 192, abs=1e-12)
    assert report["br_value_seat1"] == pytest.approx(0.9248677248677248, abs=1e-12)
    assert report["value_selfplay_seat0"] == pytest.approx(0.2968253968253967, abs=1e-12)
    assert report["value_selfplay_seat1"] == -report["value_selfplay_seat0"]


def test_a_minimax_player_cannot_be_exploited(positions: dict[object, Position]) -> None:
    report = _report(positions, _minimax)
    assert report["exploitability"] == pytest.approx(0.0, abs=1e-12)
    assert report["value_selfplay_seat0"] == pytest.approx(0.0, abs=1e-12)


def test_one_losing_reply_is_exploitable_by_exactly_its_mistake(
    positions: dict[object, Position],
) -> None:
    """Minimax everywhere, except that seat 1 answers a corner opening with the adjacent
    edge (cell 1), which loses by force: a best-responding seat 0 then wins outright
    (value 1), seat 1 gains nothing against this otherwise perfect seat 0 (value 0), so
    exploitability = (1 + 0) / 2."""

    def leaky(positions: Sequence[tuple[State, Seat]]) -> list[dict[Move, float]]:
        out = _minimax(positions)
        for k, (state, _) in enumerate(positions):
            if state.board == (0, -1, -1, -1, -1, -1, -1, -1, -1):  # type: ignore[attr-defined]
                out[k] = {"[1]": 1.0}
        return out

    report = _report(positions, leaky)
    assert report["br_value_seat0"] == pytest.approx(1.0)  # opens in the corner, then wins
    assert report["br_value_seat1"] == pytest.approx(0.0)
    assert report["exploitability"] == pytest.approx(0.5)


def test_full_history_keys_are_refused_past_the_limit() -> None:
    def history_key(state: State) -> tuple[Move, ...]:
        return tuple(state.move_history)

    with pytest.raises(ValueError, match="latest-state observation"):
        game_positions(make("TicTacToe-v0"), history_key, max_positions=1000)


def test_a_distribution_over_an_illegal_move_is_refused(
    positions: dict[object, Position],
) -> None:
    def bad(asked: Sequence[tuple[State, Seat]]) -> list[dict[Move, float]]:
        return [{"[9]": 1.0} for _ in asked]

    with pytest.raises(ValueError, match="not legal"):
        _report(positions, bad)
