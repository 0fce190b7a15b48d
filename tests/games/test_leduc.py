"""Leduc Hold'em against OpenSpiel's `leduc_poker`, game by game.

Random games are dealt and played in both implementations at once: at every decision the
same player is to move with the same legal moves (ours mapped to OpenSpiel's ids), every
game ends at the same point, and the returns are equal. Then hand-worked games."""

from __future__ import annotations

import random

import pytest

from spiral.games.leduc_poker import BET, CALL, CHECK, FOLD, OPENSPIEL_ACTION, RAISE, LeducPoker

pyspiel = pytest.importorskip("pyspiel")
GAMES = 10_000


def _mismatches(seed: int, games: int) -> list[str]:
    game = pyspiel.load_game("leduc_poker")
    rng = random.Random(seed)
    found: list[str] = []
    for number in range(games):
        theirs = game.new_initial_state()
        dealt: list[int] = []
        ours: LeducPoker | None = None
        while not theirs.is_terminal():
            if theirs.is_chance_node():
                card = rng.choice([a for a, _ in theirs.chance_outcomes()])
                dealt.append(card)
                theirs.apply_action(card)
                if len(dealt) == 2:  # the public card is drawn before any move is known
                    public = rng.choice([c for c in range(6) if c not in dealt])
                continue
            if ours is None:
                ours = LeducPoker(cards=(dealt[0], dealt[1], public))
            if len(dealt) == 3 and dealt[2] != public:
                found.append(f"game {number}: OpenSpiel dealt {dealt[2]}, forced {public}")
                break
            legal = {OPENSPIEL_ACTION[m] for m in ours.legal_actions()}
            if ours.current_player() != theirs.current_player() or legal != set(
                theirs.legal_actions()
            ):
                found.append(
                    f"game {number} at {ours.openspiel_actions()}: {legal} vs {theirs.legal_actions()}"
                )
                break
            move = rng.choice(ours.legal_actions())
            ours.apply_action(move)
            theirs.apply_action(OPENSPIEL_ACTION[move])
            if theirs.is_chance_node():  # the round closed: deal the forced public card
                theirs.apply_action(public)
                dealt.append(public)
        else:
            assert ours is not None
            if not ours.is_terminal() or ours.returns() != tuple(theirs.returns()):
                found.append(f"game {number}: returns {ours.returns()} vs {theirs.returns()}")
    return found


def test_ten_thousand_random_games_match_openspiel() -> None:
    assert _mismatches(seed=0, games=GAMES) == []


def test_the_comparison_finds_a_planted_rule_change(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("spiral.games.leduc_poker.RAISE_SIZE", (2, 2))  # a wrong second round
    assert _mismatches(seed=1, games=300) != []


def test_hand_worked_games() -> None:
    # J vs Q, public J: player 0 pairs. Bet, raise, call; then bet, call: 1 + 4 + 4 each side.
    game = LeducPoker(cards=(0, 2, 1))
    for move in (BET, RAISE, CALL, BET, CALL):
        game.apply_action(move)
    assert game.returns() == (9.0, -9.0)
    # Equal ranks split; a fold loses what the folder put in (player 1: ante and a call of 2).
    split = LeducPoker(cards=(4, 5, 0))
    for move in (CHECK, CHECK, CHECK, CHECK):
        split.apply_action(move)
    assert split.returns() == (0.0, 0.0)
    folded = LeducPoker(cards=(0, 2, 4))
    for move in (CHECK, BET, CALL, BET, FOLD):
        folded.apply_action(move)
    assert folded.returns() == (3.0, -3.0)
    # Two bets or raises a round at most; the second round opens with player 0.
    capped = LeducPoker(cards=(0, 2, 4))
    for move in (BET, RAISE):
        capped.apply_action(move)
    assert capped.legal_actions() == [FOLD, CALL]
    capped.apply_action(CALL)
    assert capped.current_player() == 0 and capped.legal_actions() == [CHECK, BET]
    assert "The public card is: K" in capped.observation(1)
    assert len(LeducPoker.chance_outcomes() or ()) == 120
