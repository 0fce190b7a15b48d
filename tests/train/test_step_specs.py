"""The games of a step: round-robin over env_ids; balanced_chance deals evenly."""

from __future__ import annotations

from collections import Counter

from spiral import games
from spiral.train.config import parse_config
from spiral.train.loop import step_specs

KUHN = "KuhnPokerSingle-v0"


def _deals(batch_size: int, step: int, *extra: str) -> Counter[tuple[int, int]]:
    cfg = parse_config([f"env_ids={KUHN}", f"batch_size={batch_size}", *extra])
    return Counter(
        games.make(s.game_id, seed=s.seed, **dict(s.params)).cards  # type: ignore[attr-defined]
        for s in step_specs(cfg, step, {})
    )


def test_balanced_chance_deals_each_kuhn_deal_equally_often() -> None:
    deals = _deals(24, 0, "balanced_chance=true")  # 12 hands: each of the 6 deals twice
    assert len(deals) == 6 and set(deals.values()) == {2}
    # 4 hands a step: consecutive steps continue the rotation, 3 steps = every deal twice.
    rotation = sum((_deals(8, step, "balanced_chance=true") for step in range(3)), Counter())
    assert set(rotation.values()) == {2} and len(rotation) == 6


def test_random_deals_by_default_and_for_games_without_a_list() -> None:
    deals = _deals(24, 0)
    assert sum(deals.values()) == 12 and set(deals.values()) != {2}  # seeded, uneven
    assert games.chance_outcomes("TicTacToe-v0") == ()
    assert games.chance_outcomes("KuhnPoker-v1") is None
    assert games.chance_outcomes("openspiel:kuhn_poker") is None
