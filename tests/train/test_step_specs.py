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


def test_a_step_holding_part_of_leduc_cycle_deals_every_card_about_equally() -> None:
    """Leduc's 120 deals at 64 hands a step: taken in their listed order (sorted by the
    cards) a step dealt seat 0 no K at all; spread, every seat's card, and the public one,
    comes 19-24 times in every step, and 15 steps deal every deal exactly 8 times."""
    cfg = parse_config(["env_ids=LeducPoker-v0", "batch_size=128", "balanced_chance=true"])
    total: Counter[tuple[int, ...]] = Counter()
    for step in range(15):
        cards = [tuple(s.params["cards"]) for s in step_specs(cfg, step, {})]
        total.update(cards)
        for seat in range(3):  # seat 0, seat 1, the public card
            ranks = Counter(c[seat] // 2 for c in cards)
            assert len(ranks) == 3 and min(ranks.values()) >= 19 and max(ranks.values()) <= 24
    assert len(total) == 120 and set(total.values()) == {8}


def test_steps_holding_whole_cycles_keep_the_listed_order() -> None:
    cfg = parse_config([f"env_ids={KUHN}", "batch_size=24", "balanced_chance=true"])
    listed = [o["cards"] for o in games.chance_outcomes(KUHN) or ()]
    assert [s.params["cards"] for s in step_specs(cfg, 0, {})] == listed * 2
