"""How fast a game's rules run: uniform-random playouts per second on one core.

Choices: a benchmark helper, not a test (tests never assert on time). Games are made with
consecutive seeds starting at `seed` and moves are chosen by a local seeded
`random.Random`, so the work done is reproducible; only the timing varies. Creating the
game (rules text, deal) is counted, since rollouts pay for it too.
"""

from __future__ import annotations

import random
import time

from spiral.games.registry import make


def play_random(game_id: str, seed: int, rng: random.Random) -> int:
    """Play one uniform-random game to the end; returns the number of moves."""
    state = make(game_id, seed=seed)
    moves = 0
    while not state.is_terminal():
        state.apply_action(rng.choice(state.legal_actions()))
        moves += 1
    return moves


def games_per_second(game_id: str, seconds: float = 2.0, seed: int = 0) -> float:
    """Random-play games finished per second over about `seconds` of wall time."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    rng = random.Random(seed)
    games = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        play_random(game_id, seed + games, rng)
        games += 1
        now = time.perf_counter()
        if now >= deadline:
            return games / (now - start)
