"""Kuhn poker: single-hand payoffs and OpenSpiel mapping; the 5-hand match's chips and order."""

from __future__ import annotations

import itertools

import pytest

from spiral.games import make
from spiral.games.kuhn_poker import KuhnPoker, KuhnPokerSingle

DEALS = list(itertools.permutations(range(3), 2))
LETTER_TO_MOVE = {"": {"p": "[check]", "b": "[bet]"}, "bet": {"p": "[fold]", "b": "[call]"}}


def _single(cards: tuple[int, int], history: str) -> KuhnPokerSingle:
    state = make("KuhnPokerSingle-v0", seed=0, cards=cards)
    assert isinstance(state, KuhnPokerSingle)
    for letter in history:
        facing_bet = "[fold]" in state.legal_actions()
        state.apply_action(LETTER_TO_MOVE["bet" if facing_bet else ""][letter])
    return state


@pytest.mark.parametrize(
    ("cards", "history", "returns"),
    [
        ((2, 0), "pp", (1.0, -1.0)),  # check-down: higher card takes 1
        ((0, 1), "pp", (-1.0, 1.0)),
        ((0, 2), "bp", (1.0, -1.0)),  # P1 folds to a bet: P0 wins the ante
        ((1, 2), "bb", (-2.0, 2.0)),  # called bet: 2 chips
        ((2, 1), "bb", (2.0, -2.0)),
        ((2, 0), "pbp", (-1.0, 1.0)),  # P0 folds after check-bet
        ((1, 0), "pbb", (2.0, -2.0)),
    ],
)
def test_single_hand_returns_are_chips(cards, history, returns) -> None:
    state = _single(cards, history)
    assert state.is_terminal()
    assert state.returns() == returns
    assert state.history_string() == history


def test_single_hand_player_zero_opens_and_cards_are_exposed() -> None:
    state = _single((1, 2), "")
    assert state.current_player() == 0 and state.first_mover == 0
    assert state.cards == (1, 2) and state.card(0) == 1
    assert state.legal_actions() == ["[check]", "[bet]"]
    assert "Your card is: Q\nYour available actions are: [check], [bet]" in state.observation(0)
    assert "Your card is: K" in state.observation(1)
    assert "Your card is: Q" not in state.observation(1)


def test_single_hand_rejects_bad_cards() -> None:
    with pytest.raises(ValueError, match="two different ranks"):
        make("KuhnPokerSingle-v0", cards=(1, 1))
    with pytest.raises(ValueError):
        make("KuhnPokerSingle-v0", cards=(0, 3))


def _single_seeded(seed: int) -> KuhnPokerSingle:
    state = make("KuhnPokerSingle-v0", seed=seed)
    assert isinstance(state, KuhnPokerSingle)
    return state


def test_single_hand_deals_every_pair_from_the_seed() -> None:
    seen = {_single_seeded(s).cards for s in range(200)}
    assert seen == set(DEALS)


def test_history_string_matches_openspiel_information_states() -> None:
    pyspiel = pytest.importorskip("pyspiel")
    game = pyspiel.load_game("kuhn_poker")
    for cards in DEALS:
        for history in ("", "p", "b", "pb", "pp", "bp", "bb", "pbp", "pbb"):
            ours = _single(cards, history)
            theirs = game.new_initial_state()
            theirs.apply_action(cards[0])
            theirs.apply_action(cards[1])
            for letter in history:
                theirs.apply_action(0 if letter == "p" else 1)
            assert ours.is_terminal() == theirs.is_terminal()
            if ours.is_terminal():
                assert list(ours.returns()) == theirs.returns()
                continue
            seat = ours.current_player()
            assert seat == theirs.current_player()
            assert f"{ours.card(seat)}{ours.history_string()}" == (
                theirs.information_state_string(seat)
            )


def _match(seed: int = 0, **params: int) -> KuhnPoker:
    state = make("KuhnPoker-v1", seed=seed, **params)
    assert isinstance(state, KuhnPoker)
    return state


def test_player_one_opens_hand_one_and_the_opener_alternates() -> None:
    state = _match()
    openers = []
    for hand in range(1, 6):
        assert state.round == hand
        openers.append(state.current_player())
        state.apply_action("[check]")
        state.apply_action("[check]")
    assert openers == [1, 0, 1, 0, 1]
    assert state.is_terminal()


def test_real_chips_called_bet_moves_two_and_fold_moves_one() -> None:
    state = _match(seed=4)
    assert state.chips == (-1, -1)  # antes are in the pot
    c0, c1 = state.card(0), state.card(1)
    state.apply_action("[bet]")  # player 1 opens
    assert state.chips == (-1, -2)
    state.apply_action("[call]")
    winner = 0 if c0 > c1 else 1
    after_one = (2, -2) if winner == 0 else (-2, 2)
    assert state.chips == (after_one[0] - 1, after_one[1] - 1)  # hand 2's antes taken
    assert f"Player {winner} wins pot of 4 chips." in state.observation(0)
    # hand 2: player 0 opens and bets, player 1 folds: player 0 nets the ante (+1)
    assert state.current_player() == 0
    state.apply_action("[bet]")
    state.apply_action("[fold]")
    assert state.chips == (after_one[0] + 1 - 1, after_one[1] - 1 - 1)
    assert "Player 1 has folded. Player 0 wins pot of 3 chips." in state.observation(1)


def test_chip_leader_wins_and_equal_chips_draw() -> None:
    # Two hands, each opener bets and the other folds: +1 each way, chips equal -> draw.
    state = _match(max_rounds=2)
    for _ in range(2):
        state.apply_action("[bet]")
        state.apply_action("[fold]")
    assert state.is_terminal() and state.chips == (0, 0) and state.returns() == (0.0, 0.0)
    # One hand: opener (player 1) bets, player 0 folds -> player 1 leads and wins.
    state = _match(max_rounds=1)
    state.apply_action("[bet]")
    state.apply_action("[fold]")
    assert state.chips == (-1, 1) and state.returns() == (-1.0, 1.0)
    assert "Player 1 won by having more chips" in state.observation(0)


def test_match_messages_follow_the_original() -> None:
    state = _match(seed=1)
    card = "JQK"[state.card(1)]
    opener_view = state.observation(1)
    assert opener_view.startswith("[GAME] You are Player 1 in a 5 round game of Kuhn Poker.")
    assert opener_view.endswith(
        f"[GAME] Starting round 1 out of 5 rounds.\nYour card is: {card}\n"
        "Your available actions are: [check], [bet]"
    )
    assert "Your available actions" not in state.observation(0).split("Starting round 1")[1]
    state.apply_action("[bet]")
    assert state.observation(0).endswith(
        "[Player 1] [bet]\n[GAME] Your available actions are: [fold], [call]"
    )
    assert state.legal_actions() == ["[fold]", "[call]"]
    state.apply_action("[call]")
    c0, c1 = ("JQK"[state.private_info(s)[0][0]] for s in (0, 1))  # type: ignore[index]
    assert f"[GAME] Cards: Player 0 had {c0}, Player 1 had {c1}" in state.observation(1)
    assert "Starting round 2 out of 5 rounds." in state.observation(0)


def test_match_private_info_adds_cards_shown_at_showdown() -> None:
    state = _match(seed=2)
    own0, own1 = state.card(0), state.card(1)
    assert state.private_info(0) == ((own0, -1),)
    state.apply_action("[check]")
    state.apply_action("[check]")
    assert state.private_info(0)[0] == (own0, own1)
    assert state.private_info(1)[0] == (own1, own0)


def test_situation_names_who_opens_and_the_bet_size() -> None:
    state = make("KuhnPokerSingle-v0", cards=(2, 0))
    assert "No bets yet: you act first." in state.situation(0)
    assert "No bets yet: Player 0 acts first." in state.situation(1)
    match = make("KuhnPoker-v1", seed=0, bet=2)
    match.apply_action("[bet]")
    assert "bet 2 chips" in match.situation(match.current_player())
    single = make("KuhnPokerSingle-v0", cards=(2, 0))
    single.apply_action("[bet]")
    assert "Player 0 bet 1 chip." in single.situation(1)
