"""RAE: advantages against baselines read before the update, one EMA step per batch."""

from __future__ import annotations

import json

import pytest

from spiral.algo.rae import Baselines, rae_advantages, turn_advantages
from spiral.types import Completion, Episode, Turn

TTT = "TicTacToe-v0"
KUHN = "KuhnPoker-v1"


def _turn(game_id: str, seat: int, agent: str = "policy", sampled: bool = True) -> Turn:
    completion = Completion((5, 6), (-0.1, -0.2), "eos", "x") if sampled else None
    return Turn(game_id, seat, agent, "obs", (1, 2), completion)


def _episode(
    game_id: str,
    returns: tuple[float, float],
    agents: tuple[str, str] = ("policy", "policy"),
    sampled: tuple[bool, bool] = (True, True),
) -> Episode:
    turns = (
        _turn(game_id, 0, agents[0], sampled[0]),
        _turn(game_id, 1, agents[1], sampled[1]),
        _turn(game_id, 0, agents[0], sampled[0]),
    )
    return Episode(game_id, 0, turns, returns, "win", agents=agents)


def test_advantage_uses_baseline_before_update_and_one_update_per_batch() -> None:
    episodes = [_episode(TTT, (1, -1)), _episode(TTT, (-1, 1)), _episode(TTT, (1, -1))]
    baselines = Baselines({(TTT, 0): 0.2})
    adv, new, metrics = rae_advantages(episodes, baselines, decay=0.9)
    # Seat 0: R - 0.2 with the old baseline; seat 1: R - 0 (missing reads as 0).
    assert adv == pytest.approx(
        {(0, 0): 0.8, (1, 0): -1.2, (2, 0): 0.8, (0, 1): -1.0, (1, 1): 1.0, (2, 1): -1.0}
    )
    # b <- 0.9 b + 0.1 mean(R): seat 0 mean 1/3, seat 1 mean -1/3.
    assert new.get(TTT, 0) == pytest.approx(0.9 * 0.2 + 0.1 / 3)
    assert new.get(TTT, 1) == pytest.approx(-0.1 / 3)
    assert metrics[f"rae/{TTT}/seat0/baseline"] == pytest.approx(0.2)
    assert metrics[f"rae/{TTT}/seat0/baseline_updated"] == pytest.approx(0.21333333)
    assert metrics[f"rae/{TTT}/seat1/mean_return"] == pytest.approx(-1 / 3)
    assert metrics[f"rae/{TTT}/seat0/count"] == 3.0
    assert metrics["rae/num_seats"] == 6.0
    assert metrics["rae/mean_advantage"] == pytest.approx((0.4 - 1.0) / 6)
    # The input is a value and stays untouched.
    assert baselines.get(TTT, 0) == 0.2 and baselines.get(TTT, 1) == 0.0


def test_reward_is_counted_once() -> None:
    # The original's 2R - b would give 2*1 - 0.5 = 1.5; RAE is R - b = 0.5.
    adv, _, _ = rae_advantages([_episode(TTT, (1, -1))], Baselines({(TTT, 0): 0.5}))
    assert adv[(0, 0)] == pytest.approx(0.5)


def test_games_and_seats_have_separate_baselines() -> None:
    episodes = [_episode(TTT, (1, -1)), _episode(KUHN, (-2, 2))]
    _, new, _ = rae_advantages(episodes, Baselines(), decay=0.5)
    assert new.values == {(TTT, 0): 0.5, (TTT, 1): -0.5, (KUHN, 0): -1.0, (KUHN, 1): 1.0}


def test_result_does_not_depend_on_completion_order() -> None:
    episodes = [_episode(TTT, (1, -1)), _episode(TTT, (0, 0)), _episode(TTT, (-1.5, 0.5))]
    start = Baselines({(TTT, 0): 0.3, (TTT, 1): -0.1})
    adv_fwd, new_fwd, _ = rae_advantages(episodes, start)
    adv_rev, new_rev, _ = rae_advantages(episodes[::-1], start)
    assert new_fwd == new_rev
    n = len(episodes)
    assert {(n - 1 - i, s): a for (i, s), a in adv_rev.items()} == adv_fwd


def test_scripted_and_untrained_seats_are_skipped() -> None:
    scripted = _episode(TTT, (1, -1), agents=("policy", "random"), sampled=(True, False))
    frozen = _episode(TTT, (-1, 1), agents=("policy", "checkpoint:3"))
    adv, new, metrics = rae_advantages([scripted, frozen], Baselines(), trained_agents={"policy"})
    assert set(adv) == {(0, 0), (1, 0)}
    assert (TTT, 1) not in new.values
    assert f"rae/{TTT}/seat1/baseline" not in metrics
    # Without the filter, the frozen checkpoint's sampled turns count (they are trainable).
    adv_all, _, _ = rae_advantages([scripted, frozen], Baselines())
    assert set(adv_all) == {(0, 0), (1, 0), (1, 1)}


def test_without_baseline_advantage_is_return_but_baseline_is_tracked() -> None:
    adv, new, _ = rae_advantages(
        [_episode(TTT, (1, -1))], Baselines({(TTT, 0): 0.5}), decay=0.5, use_baseline=False
    )
    assert adv == {(0, 0): 1.0, (0, 1): -1.0}
    assert new.get(TTT, 0) == pytest.approx(0.75)


@pytest.mark.parametrize("decay", [0.0, 1.0, -0.1, 1.5])
def test_decay_outside_open_interval_is_rejected(decay: float) -> None:
    with pytest.raises(ValueError, match="0 < decay < 1"):
        rae_advantages([_episode(TTT, (1, -1))], Baselines(), decay=decay)


def test_non_finite_return_fails_loudly() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        rae_advantages([_episode(TTT, (float("nan"), 0.0))], Baselines())


def test_empty_batch_changes_nothing() -> None:
    start = Baselines({(TTT, 0): 0.3})
    adv, new, metrics = rae_advantages([], start)
    assert adv == {} and new == start
    assert metrics == {"rae/num_seats": 0.0, "rae/mean_advantage": 0.0}


def test_baselines_json_round_trip_and_read_only() -> None:
    baselines = Baselines({(TTT, 0): 0.25, (KUHN, 1): -0.125})
    text = json.dumps(baselines.to_json())
    assert Baselines.from_json(json.loads(text)) == baselines
    assert Baselines.from_json(text) == baselines
    assert baselines.get("NoSuchGame", 0) == 0.0
    with pytest.raises(TypeError):
        baselines.values[(TTT, 0)] = 1.0  # type: ignore[index]
    with pytest.raises(ValueError, match="to_json"):
        Baselines.from_json({"values": []})


def test_turn_advantages() -> None:
    assert turn_advantages(2.0, 3, gamma=0.5) == [0.5, 1.0, 2.0]
    assert turn_advantages(-1.5, 2) == [-1.5, -1.5]
    assert turn_advantages(1.0, 0) == []
    with pytest.raises(ValueError):
        turn_advantages(1.0, 2, gamma=0.0)


def test_counts_round_trip_and_old_checkpoints_read() -> None:
    _, b, _ = rae_advantages([_episode(TTT, (1, -1))], Baselines({}), decay=0.5)
    again = Baselines.from_json(json.loads(json.dumps(b.to_json())))
    assert again == b and again.counts[(TTT, 0)] == 1
    old = Baselines.from_json({"baselines": [{"game_id": TTT, "seat": 0, "value": 0.3}]})
    assert old.get(TTT, 0) == pytest.approx(0.3) and not old.counts
