"""OpenSpiel and TextArena adapters: random play, known values, hidden info, invalid moves."""

from __future__ import annotations

import random
import sys
from collections import Counter

import pytest

from spiral.games import IllegalMoveError, State, make

pyspiel = pytest.importorskip("pyspiel")


def _play(state: State, seed: int) -> State:
    rng = random.Random(seed)
    while not state.is_terminal():
        legal = state.legal_actions()
        assert legal and state.current_player() in (0, 1)
        assert len(set(legal)) == len(legal)  # canonical strings are unique
        state.apply_action(rng.choice(legal))
    assert state.current_player() == -1 and state.legal_actions() == []
    return state


@pytest.mark.parametrize("name", ["tic_tac_toe", "kuhn_poker", "liars_dice"])
def test_openspiel_random_playouts_are_zero_sum_and_seeded(name: str) -> None:
    outcomes: Counter[float] = Counter()
    for seed in range(200):
        a = _play(make(f"openspiel:{name}", seed=seed), seed)
        r0, r1 = a.returns()
        assert r0 == -r1
        outcomes[r0] += 1
        if seed < 5:
            b = _play(make(f"openspiel:{name}", seed=seed), seed)
            assert b.move_history == a.move_history and b.observation(0) == a.observation(0)
    assert len(outcomes) >= 2


def test_openspiel_tic_tac_toe_random_play_matches_the_known_rates() -> None:
    # Random vs random: first mover wins 58.49%, draws 12.70%, loses 28.81% (docs/games.md).
    games = 3000
    results = Counter(
        _play(make("openspiel:tic_tac_toe", seed=s), s).returns()[0] for s in range(games)
    )
    assert abs(results[1.0] / games - 0.5849) < 0.04
    assert abs(results[0.0] / games - 0.1270) < 0.03
    assert abs(results[-1.0] / games - 0.2881) < 0.04


def test_openspiel_kuhn_uniform_value_and_uniform_deals() -> None:
    # Uniform vs uniform, P0's expected payoff is +0.125 (docs/games.md); payoffs are
    # OpenSpiel's own (+-1, +-2). Each of the 6 deals has probability 1/6.
    games = 6000
    total, deals = 0.0, Counter[tuple[object, object]]()
    for seed in range(games):
        state = make("openspiel:kuhn_poker", seed=seed)
        deals[(state.private_info(0), state.private_info(1))] += 1
        total += _play(state, seed).returns()[0]
    assert abs(total / games - 0.125) < 0.07  # about 4 standard errors
    assert len(deals) == 6 and all(abs(n / games - 1 / 6) < 0.03 for n in deals.values())


def test_openspiel_kuhn_hides_the_other_card() -> None:
    by_card: dict[object, int] = {}
    pair = None
    for seed in range(50):
        state = make("openspiel:kuhn_poker", seed=seed)
        key = state.private_info(0)
        if key in by_card and make("openspiel:kuhn_poker", seed=by_card[key]).private_info(
            1
        ) != state.private_info(1):
            pair = (by_card[key], seed)
            break
        by_card.setdefault(key, seed)
    assert pair is not None
    a, b = (make("openspiel:kuhn_poker", seed=s) for s in pair)
    for move in ("[Pass]", "[Bet]"):
        for style in ("history", "latest"):
            assert a.observation(0, style) == b.observation(0, style)
        a.apply_action(move)
        b.apply_action(move)
    assert a.observation(0) == b.observation(0)
    assert a.observation(1) != b.observation(1)  # seat 1's own card differs


@pytest.mark.parametrize("name", ["phantom_ttt", "dark_hex", "matrix_rps", "goofspiel"])
def test_openspiel_hidden_moves_stay_hidden(name: str) -> None:
    """In a game whose moves are hidden, the seat that did not move is never told them:
    every move seat 0 could make leaves seat 1's observation (both styles) the same."""
    seen = set()
    for move in make(f"openspiel:{name}", seed=0).legal_actions():
        state = make(f"openspiel:{name}", seed=0)
        state.apply_action(move)
        seen.add(tuple(state.observation(1, style) for style in ("history", "latest")))
        assert move in state.observation(0, "history")  # the mover is told its own move
    assert len(seen) == 1


def test_openspiel_moves_illegal_moves_and_observation() -> None:
    state = make("openspiel:tic_tac_toe", seed=0)
    assert state.legal_actions()[4] == "[x(1,1)]"
    state.apply_action("[X(1,1)]")  # case-insensitive
    assert state.move_history == [(0, "[x(1,1)]")]
    with pytest.raises(IllegalMoveError):
        state.apply_action("[o(1,1)]")  # occupied
    assert len(state.move_history) == 1
    assert ".x." in state.observation(1) and "Available Moves: '[o(0,0)]'" in state.observation(1)


def test_openspiel_clone_is_independent_and_carries_its_rng() -> None:
    state = make("openspiel:liars_dice", seed=3)
    state.apply_action(state.legal_actions()[0])
    clone = state.clone()
    _play(clone, 7)
    assert len(state.move_history) == 1 and not state.is_terminal()
    _play(state, 7)
    assert state.move_history == clone.move_history and state.returns() == clone.returns()


def test_openspiel_params_max_turns_and_refusals() -> None:
    state = make("openspiel:liars_dice", seed=0, numdice=2)
    assert "[4-6]" in state.legal_actions()  # 4 dice in play
    truncated = make("openspiel:tic_tac_toe", seed=0, max_turns=2)
    _play(truncated, 0)
    assert truncated.truncated() and truncated.returns() == (0.0, 0.0)
    rps = make("openspiel:matrix_rps", seed=0)  # simultaneous moves, taken in turn
    assert "simultaneous moves taken here in turn" in rps.observation(0)
    _play(rps, 0)
    assert rps.is_terminal() and sum(rps.returns()) == 0
    with pytest.raises(ValueError, match="3 players"):
        make("openspiel:kuhn_poker", players=3)


def test_openspiel_missing_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyspiel", None)  # as if open-spiel were not installed
    with pytest.raises(ModuleNotFoundError, match=r"spiral-selfplay\[openspiel\]"):
        make("openspiel:kuhn_poker")


# ---- TextArena -----------------------------------------------------------------------
def _require_textarena() -> None:
    pytest.importorskip("textarena")


def test_textarena_tictactoe_moves_from_the_observation() -> None:
    _require_textarena()
    state = make("textarena:TicTacToe-v0", seed=0)
    assert state.legal_actions() == [f"[{i}]" for i in range(9)]
    state.apply_action("[4]")
    assert "[4]" not in state.legal_actions() and state.current_player() == 1
    with pytest.raises(IllegalMoveError):
        state.apply_action("[4]")
    obs = state.observation(1)
    assert obs.startswith("[GAME] You are Player 1 in Tic Tac Toe.")
    assert "[Player 0] [4]" in obs and " 3 | O | 5 " in obs


def test_textarena_tictactoe_random_play_matches_the_known_rates() -> None:
    _require_textarena()
    games = 600
    results = Counter(
        _play(make("textarena:TicTacToe-v0", seed=s), s).returns()[0] for s in range(games)
    )
    assert abs(results[1.0] / games - 0.5849) < 0.06
    assert abs(results[-1.0] / games - 0.2881) < 0.06


def test_textarena_open_game_detects_invalid_moves_explicitly_and_restores() -> None:
    _require_textarena()
    state = make("textarena:LiarsDice-v0", seed=3)
    assert state.legal_actions() == []  # an open game: the env judges moves
    assert state.parse_action("no brackets") is None
    state.apply_action("[Bid: 2, 3]")
    before = (list(state.move_history), state.observation(0), state.observation(1))
    with pytest.raises(IllegalMoveError, match="lower than current"):
        state.apply_action("[Bid: 1, 1]")
    assert (list(state.move_history), state.observation(0), state.observation(1)) == before
    assert state.current_player() == 1 and not state.is_terminal()
    state.apply_action("[Call]")  # after a call the loser may move again: not invalid
    assert len(state.move_history) == 2


def test_textarena_games_are_seeded_and_isolated_from_global_random() -> None:
    _require_textarena()
    a, b = make("textarena:LiarsDice-v0", seed=9), make("textarena:LiarsDice-v0", seed=9)
    moves = ["[Bid: 1, 2]", "[Call]", "[Bid: 3, 4]", "[Call]"]
    for move in moves:
        a.apply_action(move)
        random.random()  # other users of the global generator must not change the game
        b.apply_action(move)
    assert a.observation(0) == b.observation(0) and a.observation(1) == b.observation(1)
    seen_by_0 = a.observation(0)
    clone = a.clone()
    clone.apply_action("[Bid: 1, 1]")
    clone.apply_action("[Call]")
    assert len(a.move_history) == len(moves) and a.observation(0) == seen_by_0
    assert clone.observation(0) != seen_by_0


def test_textarena_unknown_env_is_a_clear_error() -> None:
    _require_textarena()
    with pytest.raises(KeyError, match="TicTacToe-v0"):
        make("textarena:TicTacToe-v9")


def test_textarena_open_game_refuses_a_move_that_is_not_text() -> None:
    _require_textarena()
    state = make("textarena:ConnectFour-v0", seed=0)
    before = list(state.move_history)
    for move in (None, 3, b"[col 3]", ["[col 3]"]):
        with pytest.raises(IllegalMoveError, match="a move is text"):
            state.apply_action(move)  # type: ignore[arg-type]
    assert state.move_history == before
