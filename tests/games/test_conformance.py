"""One conformance suite for every registered game id (spiral.games.ids()).

Seeded uniform-random playouts must end with zero-sum returns; legal moves are non-empty
and the seat to move is 0 or 1 until the end (-1 after); clones are independent (rng
included) and continue identically; the same seed replays the same game; a seat's
observation does not depend on the other seat's hidden information; illegal moves raise
IllegalMoveError and change nothing; parsing tolerates case and spacing; `max_turns`
truncates to a draw.
"""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

from spiral.games import IllegalMoveError, State, ids, make

GAME_IDS = ids()
# Random playouts per game: thousands in total, fewer for the slower games.
PLAYOUTS = {"TicTacToe-v0": 2000, "KuhnPoker-v1": 2000, "KuhnPokerSingle-v0": 2000}
DEFAULT_PLAYOUTS = 150
MAX_MOVES = 5000  # no registered game should come anywhere near this in random play


def _play_random(state: State, rng: random.Random, max_moves: int = MAX_MOVES) -> None:
    for _ in range(max_moves):
        if state.is_terminal():
            return
        state.apply_action(rng.choice(state.legal_actions()))
    raise AssertionError(f"{state.game_id} did not end within {max_moves} random moves")


def _snapshot(state: State) -> tuple[object, ...]:
    """Everything observable about a state, for equality checks."""
    return (
        tuple(state.move_history),
        state.current_player(),
        tuple(state.legal_actions()),
        state.is_terminal(),
        state.returns(),
        tuple(state.observation(seat, style) for seat in (0, 1) for style in ("history", "latest")),
    )


def test_core_games_are_registered() -> None:
    for game_id in ("TicTacToe-v0", "ConnectFour-v0", "KuhnPoker-v1", "KuhnPokerSingle-v0"):
        assert game_id in GAME_IDS


@pytest.mark.parametrize("game_id", GAME_IDS)
def test_random_playouts_end_zero_sum(game_id: str) -> None:
    outcomes: dict[tuple[float, float], int] = defaultdict(int)
    for seed in range(PLAYOUTS.get(game_id, DEFAULT_PLAYOUTS)):
        state = make(game_id, seed=seed)
        rng = random.Random(10_000 + seed)
        for _ in range(MAX_MOVES):
            if state.is_terminal():
                break
            assert state.current_player() in (0, 1), f"seed {seed}: {state!r}"
            legal = state.legal_actions()
            assert legal, f"seed {seed}: no legal moves in a live game {state!r}"
            assert state.returns() == (0.0, 0.0)
            state.apply_action(rng.choice(legal))
        assert state.is_terminal(), f"seed {seed}: no end within {MAX_MOVES} moves"
        assert state.current_player() == -1
        assert state.legal_actions() == []
        r0, r1 = state.returns()
        assert r0 == -r1, f"seed {seed}: returns {(r0, r1)} are not zero-sum"
        outcomes[(r0, r1)] += 1
    assert len(outcomes) >= 2, f"random play always ended {dict(outcomes)}: suspicious"


@pytest.mark.parametrize("game_id", GAME_IDS)
def test_clone_is_independent_and_replays(game_id: str) -> None:
    for seed in range(5):
        state = make(game_id, seed=seed)
        rng = random.Random(seed)
        for _ in range(3):  # a few moves in, so there is history to copy
            if not state.is_terminal():
                state.apply_action(rng.choice(state.legal_actions()))
        before = _snapshot(state)
        rng_before = state.rng.getstate()
        copy = state.clone()
        assert _snapshot(copy) == before
        shared = _mutable_ids(state) & _mutable_ids(copy)
        assert not shared, "the clone shares mutable attributes with the original"
        _play_random(copy, random.Random(99))
        assert _snapshot(state) == before, "playing the clone changed the original"
        assert state.rng.getstate() == rng_before, "the clone shares the original's rng"
        _play_random(state, random.Random(99))
        assert _snapshot(state) == _snapshot(copy), "clone and original diverged"


def _mutable_ids(state: State) -> set[int]:
    """ids of the lists, dicts and sets in a state's attributes, two levels deep (e.g. a
    tuple of per-seat message lists)."""
    found: set[int] = set()
    stack = [(value, 0) for value in vars(state).values()]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (list, dict, set, bytearray)):
            found.add(id(value))
        if depth < 2 and isinstance(value, (list, tuple)):
            stack.extend((v, depth + 1) for v in value)
        elif depth < 2 and isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
    return found


@pytest.mark.parametrize("game_id", GAME_IDS)
def test_same_seed_same_game(game_id: str) -> None:
    for seed in (0, 1, 2):
        a, b = make(game_id, seed=seed), make(game_id, seed=seed)
        rng_a, rng_b = random.Random(seed), random.Random(seed)
        while not a.is_terminal():
            assert _snapshot(a) == _snapshot(b)
            a.apply_action(rng_a.choice(a.legal_actions()))
            b.apply_action(rng_b.choice(b.legal_actions()))
        assert _snapshot(a) == _snapshot(b)


def _public_chance(state: State) -> object:
    """Chance outcomes both seats see (e.g. starting stocks), if the game declares them.

    A game with public chance defines `public_info()`; without it two seeds could differ
    in public and the leak test could not tell that from a leak.
    """
    public = getattr(state, "public_info", None)
    return public() if callable(public) else ()


def _skip_without_hidden_info(game_id: str) -> None:
    probe = make(game_id, seed=0)
    if probe.private_info(0) == () and probe.private_info(1) == ():
        pytest.skip(f"{game_id} has no hidden information (private_info is empty)")


def _pairs_differing_only_in_other(game_id: str, seat: int, seeds: int = 300) -> list[tuple]:
    """Seed pairs equal in `seat`'s private info and in public chance, not in the other's."""
    groups: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for seed in range(seeds):
        state = make(game_id, seed=seed)
        key = repr((state.private_info(seat), _public_chance(state)))
        groups[key].append((seed, repr(state.private_info(1 - seat))))
    pairs = []
    for members in groups.values():
        first_seed, first_other = members[0]
        pairs += [(first_seed, s) for s, other in members[1:] if other != first_other][:3]
    return pairs[:12]


@pytest.mark.parametrize("game_id", GAME_IDS)
def test_observations_leak_no_hidden_info(game_id: str) -> None:
    """Equal public moves + equal own private info => equal observation, until a reveal.

    A reveal (showdown, dice shown on a call, a re-deal) is any change of either seat's
    private info, or the end of the game; comparison stops there.
    """
    _skip_without_hidden_info(game_id)
    compared = 0
    for seat in (0, 1):
        for seed_a, seed_b in _pairs_differing_only_in_other(game_id, seat):
            compared += _compare_until_reveal(game_id, seat, seed_a, seed_b)
    if compared == 0:
        pytest.skip(f"{game_id}: no seed pair differs only in the other seat's private info")


def _compare_until_reveal(game_id: str, seat: int, seed_a: int, seed_b: int) -> int:
    a, b = make(game_id, seed=seed_a), make(game_id, seed=seed_b)
    start = [(s.private_info(0), s.private_info(1)) for s in (a, b)]
    rng = random.Random(seed_a)
    compared = 0
    while True:
        for style in ("history", "latest"):
            assert a.observation(seat, style) == b.observation(seat, style), (
                f"seat {seat}'s observation depends on the other seat's hidden info (seeds "
                f"{seed_a} vs {seed_b}, moves {a.move_history}). If the difference is public "
                "chance (dealt in the open), give the State a public_info() returning it."
            )
        compared += 1
        move = rng.choice(a.legal_actions())
        if b.parse_action(move) is None:
            return compared  # the games diverge in public; nothing more to compare
        a.apply_action(move)
        b.apply_action(move)
        now = [(s.private_info(0), s.private_info(1)) for s in (a, b)]
        if a.is_terminal() or b.is_terminal() or now != start:
            return compared


def _pairs_differing_only_in_own(game_id: str, seat: int, seeds: int = 300) -> list[tuple]:
    """Seed pairs equal in the other seat's private info and public chance, not in `seat`'s."""
    return _pairs_differing_only_in_other(game_id, 1 - seat, seeds)


@pytest.mark.parametrize("game_id", GAME_IDS)
def test_observations_show_own_hidden_info(game_id: str) -> None:
    """In every style, the seat to move is shown what it privately holds: two games that
    differ only in that give it different observations (the "latest" style too, whose
    latest message alone may not repeat a card dealt at the start)."""
    _skip_without_hidden_info(game_id)
    checked = 0
    for seat in (0, 1):
        for seed_a, seed_b in _pairs_differing_only_in_own(game_id, seat):
            a, b = make(game_id, seed=seed_a), make(game_id, seed=seed_b)
            start = [(s.private_info(0), s.private_info(1)) for s in (a, b)]
            rng = random.Random(seed_a)
            while not (a.is_terminal() or b.is_terminal()):
                if [(s.private_info(0), s.private_info(1)) for s in (a, b)] != start:
                    break
                if a.current_player() == seat:
                    for style in ("history", "latest"):
                        assert a.observation(seat, style) != b.observation(seat, style), (
                            f"seat {seat} is not shown its own hidden info in the {style!r} "
                            f"style (seeds {seed_a} vs {seed_b}, moves {a.move_history})"
                        )
                    checked += 1
                move = rng.choice(a.legal_actions())
                if b.parse_action(move) is None:
                    break
                a.apply_action(move)
                b.apply_action(move)
    if checked == 0:
        pytest.skip(f"{game_id}: no seed pair differs only in a seat's own private info")


@pytest.mark.parametrize("game_id", GAME_IDS)
def test_illegal_moves_raise_and_change_nothing(game_id: str) -> None:
    state = make(game_id, seed=3)
    rng = random.Random(3)
    seen: set[str] = set()
    while not state.is_terminal():
        seen.update(state.legal_actions())
        before = _snapshot(state)
        for move in [None, 3, b"[x]", ["[x]"]]:
            with pytest.raises(IllegalMoveError):
                state.apply_action(move)  # type: ignore[arg-type]
            assert _snapshot(state) == before, f"a rejected {move!r} changed the state"
        for move in sorted(seen) + ["[no such move]", "", "hello"]:
            if state.parse_action(move) is None:
                with pytest.raises(IllegalMoveError):
                    state.apply_action(move)
                assert _snapshot(state) == before, f"a rejected {move!r} changed the state"
        state.apply_action(rng.choice(state.legal_actions()))
    with pytest.raises(IllegalMoveError):
        state.apply_action(sorted(seen)[0])


def _variants(move: str) -> list[str]:
    spaced = move.replace("[", "[ ", 1).replace("]", " ]", 1) if move.startswith("[") else move
    wide = move.replace("[", "[ \t ", 1).replace("]", "  ]", 1).replace(" ", "  ")
    return [move.upper(), move.lower(), f"  {move}\n", spaced, wide, f" {move.swapcase()} "]


@pytest.mark.parametrize("game_id", GAME_IDS)
def test_parse_action_tolerates_case_and_whitespace(game_id: str) -> None:
    state = make(game_id, seed=5)
    rng = random.Random(5)
    while not state.is_terminal():
        for move in state.legal_actions():
            assert state.parse_action(move) == move
            for text in _variants(move):
                assert state.parse_action(text) == move, f"{text!r} should parse as {move!r}"
        move = rng.choice(state.legal_actions())
        state.apply_action(f" {move.upper()} ")
        assert state.move_history[-1][1] == move, "the history must hold the canonical move"


@pytest.mark.parametrize("game_id", GAME_IDS)
def test_max_turns_truncates_to_a_draw(game_id: str) -> None:
    truncated = 0
    for seed in range(20):
        state = make(game_id, seed=seed, max_turns=2)
        _play_random(state, random.Random(seed))
        assert len(state.move_history) <= 2
        if state.truncated():
            truncated += 1
            assert len(state.move_history) == 2
            assert state.returns() == (0.0, 0.0)
            assert state.current_player() == -1 and state.legal_actions() == []
            assert state.winner() is None
    assert truncated > 0, "max_turns=2 never truncated a game"
