"""The rated league: PlackettLuce updates checked by hand, head-to-head counts, JSON round
trips, the markdown table and win matrix, and a scripted round-robin."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from spiral import agents
from spiral.evaluation.intervals import wilson_interval
from spiral.evaluation.league import (
    DEFAULT_MU,
    DEFAULT_SIGMA,
    League,
    Rating,
    from_json,
    metrics,
    play_round_robin,
    record,
    round_robin_specs,
    table,
    to_json,
    win_matrix,
    write_league,
)
from spiral.prompts.invalid import invalid_policy
from spiral.types import Episode

BETA = 25.0 / 6.0
TAU = 25.0 / 300.0


def game(seat0: str, seat1: str, r0: float, r1: float, seed: int = 0) -> Episode:
    winner = None if r0 == r1 else (0 if r0 > r1 else 1)
    outcome = "draw" if winner is None else "win"
    return Episode("TicTacToe-v0", seed, (), (r0, r1), outcome, winner, agents=(seat0, seat1))


def beats(winner: str, loser: str) -> Episode:
    return game(winner, loser, 1.0, -1.0)


def test_rating_ordinal() -> None:
    assert Rating(30.0, 2.0).ordinal == 24.0
    assert Rating() == Rating(25.0, 25.0 / 3.0)
    assert Rating().ordinal == pytest.approx(0.0, abs=1e-12)


def test_one_win_moves_mus_apart_equally_and_lowers_sigmas() -> None:
    league = record(League(), [beats("A", "B")])
    a, b = league.rating("A"), league.rating("B")
    # Weng-Lin Plackett-Luce, 1v1 between two default players, by hand: each sigma first
    # grows by tau, s2 = sigma^2 + tau^2; c^2 = sum over both of (s2 + beta^2); both win
    # with probability 1/2, so the winner gains s2 / c * 1/2 and the loser loses as much,
    # and each variance shrinks by the factor 1 - (sqrt(s2) / c) * (s2 / c^2) / 4.
    s2 = DEFAULT_SIGMA**2 + TAU**2
    c = math.sqrt(2 * (s2 + BETA**2))
    delta = s2 / c / 2
    sigma = math.sqrt(s2 * (1 - math.sqrt(s2) / c * s2 / c**2 / 4))
    assert a.mu == pytest.approx(DEFAULT_MU + delta, rel=1e-12)
    assert b.mu == pytest.approx(DEFAULT_MU - delta, rel=1e-12)
    assert a.mu - DEFAULT_MU == pytest.approx(DEFAULT_MU - b.mu, rel=1e-12)
    assert a.sigma == b.sigma == pytest.approx(sigma, rel=1e-12)
    assert a.sigma < DEFAULT_SIGMA
    assert round(delta, 4) == 2.6354 and round(sigma, 4) == 8.0659  # the numbers, for reading
    # The seat does not matter, only who won: B losing from seat 0 gives the same ratings.
    assert record(League(), [game("B", "A", -1.0, 1.0)]) == league
    assert league.head_to_head == {("A", "B"): (1, 0, 0)}
    assert league.versus("B", "A") == (0, 0, 1)


def test_draw_between_equal_players_leaves_mus_equal() -> None:
    league = record(League(), [game("A", "B", 0.0, 0.0)])
    a, b = league.rating("A"), league.rating("B")
    assert a.mu == b.mu == pytest.approx(DEFAULT_MU)
    assert a.sigma == b.sigma < DEFAULT_SIGMA
    assert league.head_to_head == {("A", "B"): (0, 1, 0)}


def test_draw_pulls_unequal_players_together() -> None:
    ahead = record(League(), [beats("A", "B")] * 3)
    after = record(ahead, [game("A", "B", 0.5, 0.5)])
    assert after.rating("A").mu < ahead.rating("A").mu
    assert after.rating("B").mu > ahead.rating("B").mu
    assert after.versus("A", "B") == (3, 1, 0)


def test_self_play_is_skipped() -> None:
    assert record(League(), [beats("policy", "policy")]) == League()
    mixed = record(League(), [beats("policy", "policy"), beats("A", "policy")])
    assert mixed == record(League(), [beats("A", "policy")])
    assert mixed.games("policy") == 1


def test_order_matters_and_is_deterministic() -> None:
    games = [beats("A", "B"), beats("B", "A"), beats("C", "A"), game("B", "C", 0.0, 0.0)]
    first = record(League(), games)
    assert record(League(), games) == first
    reversed_ = record(League(), games[::-1])
    assert reversed_ != first
    assert reversed_.head_to_head == first.head_to_head  # same counts, other ratings
    # One call with every game is the same as one call per game, in order.
    stepwise = League()
    for ep in games:
        stepwise = record(stepwise, [ep])
    assert stepwise == first


def test_record_does_not_mutate_its_input() -> None:
    start = record(League(), [beats("A", "B")])
    snapshot = to_json(start)
    record(start, [beats("B", "A")] * 4)
    assert to_json(start) == snapshot


def test_json_round_trip_is_exact_and_resumes_identically() -> None:
    league = record(
        League(), [beats("A", "B"), game("C", "A", 0.0, 0.0), beats("C", "B"), beats("B", "A")]
    )
    text = json.dumps(to_json(league))
    back = from_json(json.loads(text))
    assert back == league
    assert from_json(text) == league  # also from the string
    for name in ("A", "B", "C"):
        assert back.rating(name).mu == league.rating(name).mu  # bit for bit, not approx
        assert back.rating(name).sigma == league.rating(name).sigma
    more = [beats("A", "C"), game("B", "C", 1.0, 1.0)]
    assert record(back, more) == record(league, more)
    assert to_json(back) == to_json(league)


def test_from_json_rejects_other_data() -> None:
    with pytest.raises(ValueError, match="expects"):
        from_json({"baselines": []})
    with pytest.raises(ValueError, match="rated with"):
        from_json({"model": "TrueSkill", "ratings": {}, "head_to_head": []})
    with pytest.raises(ValueError, match="canonical"):
        League(head_to_head={("B", "A"): (1, 0, 0)})


def test_head_to_head_is_stored_once_per_pair_in_canonical_order() -> None:
    games = [beats("B", "A")] + [beats("A", "B")] * 3 + [game("B", "A", 0.0, 0.0)]
    league = record(League(), games)
    assert league.head_to_head == {("A", "B"): (3, 1, 1)}
    assert league.versus("A", "B") == (3, 1, 1)
    assert league.versus("B", "A") == (1, 1, 3)
    assert league.totals("A") == (3, 1, 1) and league.games("B") == 5


def test_table_counts_and_wilson_interval() -> None:
    games = [beats("A", "B")] * 3 + [game("A", "B", 0.0, 0.0), beats("B", "A"), beats("A", "C")]
    league = record(League(), games)
    lines = table(league).splitlines()
    assert lines[0] == "| name | mu | sigma | ordinal | games | W-D-L | win rate [95% CI] |"
    assert [line.split(" | ")[0].lstrip("| ") for line in lines[2:]] == league.names
    ordinals = [league.rating(n).ordinal for n in league.names]
    assert ordinals == sorted(ordinals, reverse=True)
    row = {line.split(" | ")[0].lstrip("| "): line for line in lines[2:]}
    # A: 4 wins, 1 draw, 1 loss in 6 games; Wilson(4, 6) = [0.30, 0.90].
    low, high = wilson_interval(4, 6)
    assert (round(low, 2), round(high, 2)) == (0.30, 0.90)
    a = league.rating("A")
    assert row["A"] == (
        f"| A | {a.mu:.2f} | {a.sigma:.2f} | {a.ordinal:.2f} | 6 | 4-1-1 | 0.67 [0.30, 0.90] |"
    )
    assert "| 5 | 1-1-3 | 0.20 [0.04, 0.62] |" in row["B"]  # Wilson(1, 5)
    assert "| 1 | 0-0-1 | 0.00 [0.00, 0.79] |" in row["C"]  # Wilson(0, 1)
    assert table(League({"new": Rating()})).splitlines()[2].endswith("| 0 | 0-0-0 | — |")


def test_win_matrix_layout() -> None:
    games = [beats("A", "B")] * 3 + [beats("B", "A"), beats("C", "B"), game("C", "B", 0.0, 0.0)]
    league = record(League(), games)
    names = league.names
    lines = win_matrix(league).splitlines()
    assert lines[0] == "| row vs column | " + " | ".join(names) + " |"
    assert lines[1] == "|---|" + "---|" * 3
    cells = {
        line.split(" | ")[0].lstrip("| "): dict(
            zip(names, line.rstrip(" |").split(" | ")[1:], strict=True)
        )
        for line in lines[2:]
    }
    assert list(cells) == names
    assert all(cells[n][n] == "—" for n in names)
    assert cells["A"]["B"] == "0.75 (4)" and cells["B"]["A"] == "0.25 (4)"
    assert cells["C"]["B"] == "0.50 (2)" and cells["B"]["C"] == "0.00 (2)"  # a draw is not a win
    assert cells["A"]["C"] == cells["C"]["A"] == "—"  # never played


def test_metrics_keys() -> None:
    league = record(League(), [beats("A", "B")])
    out = metrics(league, prefix="pop")
    assert set(out) == {f"pop/{n}/{k}" for n in "AB" for k in ("mu", "sigma", "ordinal", "games")}
    assert out["pop/A/games"] == 1.0
    assert out["pop/A/ordinal"] == league.rating("A").ordinal
    assert set(metrics(league)) == {k.replace("pop/", "league/") for k in out}


def test_write_league_is_atomic_and_reads_back(tmp_path: Path) -> None:
    league = record(League(), [beats("A", "B"), game("A", "B", 0.0, 0.0)])
    path = write_league(tmp_path / "eval" / "league.json", league)
    assert path == tmp_path / "eval" / "league.json"
    data = json.loads(path.read_text())
    assert from_json(data) == league
    assert data["table"] == table(league)
    assert data["head_to_head"] == [{"a": "A", "b": "B", "wins_a": 1, "draws": 1, "losses_a": 0}]
    assert data["ratings"]["A"]["games"] == 2
    write_league(path, record(league, [beats("B", "A")]))  # replaces, leaves no temp file
    assert [p.name for p in path.parent.iterdir()] == ["league.json"]
    assert from_json(json.loads(path.read_text())).games("A") == 3


def test_round_robin_specs_both_seats_same_deal() -> None:
    specs = round_robin_specs(["x", "y", "z"], ["TicTacToe-v0", "KuhnPoker-v1"], games=2, seed=3)
    assert len(specs) == 3 * 2 * 2 * 2  # pairs x seat orders x games x game ids
    for pair in (("x", "y"), ("x", "z"), ("y", "z")):
        for game_id in ("TicTacToe-v0", "KuhnPoker-v1"):
            one = [s.seed for s in specs if s.seats == pair and s.game_id == game_id]
            other = [s.seed for s in specs if s.seats == pair[::-1] and s.game_id == game_id]
            assert len(one) == 2 and one == other and len(set(one)) == 2
    with pytest.raises(ValueError, match="distinct"):
        round_robin_specs(["x", "x"], ["TicTacToe-v0"], games=1)


def test_scripted_round_robin_is_rated() -> None:
    players = {
        name: agents.make(spec, game_id="TicTacToe-v0", seed=s)
        for s, (name, spec) in enumerate(
            [("rand1", "random"), ("rand2", "random"), ("opt", "optimal")]
        )
    }
    episodes = play_round_robin(players, ["TicTacToe-v0"], 4, invalid_policy("strict"), seed=1)
    assert len(episodes) == 3 * 2 * 4
    league = record(League(), episodes)
    for pair in (("opt", "rand1"), ("opt", "rand2"), ("rand1", "rand2")):
        assert sum(league.head_to_head[pair]) == 4 * 2
    assert league.versus("opt", "rand1")[2] == 0  # optimal tic-tac-toe never loses
    assert league.names[0] == "opt"
    again = play_round_robin(players, ["TicTacToe-v0"], 4, invalid_policy("strict"), seed=1)
    assert [e.seed for e in again] == [e.seed for e in episodes]
