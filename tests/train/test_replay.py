"""The replay buffer (no Ray, no model): staleness, order, bounds, metrics; and the
per-staleness update's gradient equals one call's."""

from __future__ import annotations

import functools

import pytest
import torch

from spiral.algo.losses import get_loss
from spiral.algo.regularizers import Regularizer
from spiral.train.actors.replay import ReplayBuffer, Tagged, episode_version
from spiral.train.step import forward_backward_by_staleness
from spiral.types import Completion, Datum, Episode, Turn


def _turn(version: int, agent: str = "policy", seat: int = 0) -> Turn:
    completion = Completion(tokens=(5,), logprobs=(-0.5,), stop_reason="stop", text="x")
    return Turn(
        game_id="g",
        seat=seat,
        agent=agent,
        observation="",
        prompt_ids=(1, 2),
        completion=completion,
        policy_version=version,
    )


def _episode(seed: int, version: int) -> Episode:
    turns = (_turn(version, seat=0), _turn(-1, agent="member", seat=1))
    return Episode(game_id="g", seed=seed, turns=turns, returns=(1.0, -1.0), outcome="win")


def _tagged(seed: int, version: int) -> Tagged:
    return Tagged(_episode(seed, version), version)


def test_episode_version_reads_the_policy_turns_and_refuses_a_mix() -> None:
    assert episode_version(_episode(0, 7), "policy") == 7
    assert episode_version(_episode(0, 7), "nobody") == -1
    mixed = Episode(
        game_id="g", seed=3, turns=(_turn(1), _turn(2)), returns=(0.0, 0.0), outcome="draw"
    )
    with pytest.raises(ValueError, match="mixes policy versions"):
        episode_version(mixed, "policy")


def test_take_drops_what_is_too_stale_and_hands_out_the_oldest_first() -> None:
    buffer = ReplayBuffer(capacity=10, max_staleness=2)
    buffer.put([_tagged(0, 3), _tagged(1, 5), _tagged(2, 6), _tagged(3, 7)])
    # At learner version 8, version 5 is 3 behind (> 2): dropped; 6 and 7 stay.
    assert buffer.fresh(8) == 2
    taken = buffer.take(1, version=8)
    assert [t.episode.seed for t in taken] == [2]  # version 3 and 5 dropped, 6 is oldest
    assert buffer.dropped_stale == 2
    assert [t.episode.seed for t in buffer.take(5, version=8)] == [3]
    assert len(buffer) == 0


def test_capacity_is_a_bound_and_room_says_what_still_fits() -> None:
    buffer = ReplayBuffer(capacity=3, max_staleness=5)
    buffer.put([_tagged(0, 0), _tagged(1, 0)])
    assert buffer.room() == 1
    with pytest.raises(OverflowError, match="room"):
        buffer.put([_tagged(2, 0), _tagged(3, 0)])
    with pytest.raises(ValueError):
        ReplayBuffer(capacity=0, max_staleness=1)
    with pytest.raises(ValueError):
        ReplayBuffer(capacity=1, max_staleness=-1)


def test_stats_are_ages_in_versions() -> None:
    buffer = ReplayBuffer(capacity=8, max_staleness=5)
    buffer.put([_tagged(0, 2), _tagged(1, 4), _tagged(2, 5)])
    stats = buffer.stats(version=6)
    assert stats["replay_buffer/size"] == 3
    assert stats["replay_buffer/oldest_age"] == 4
    assert stats["replay_buffer/newest_age"] == 1
    assert stats["replay_buffer/mean_age"] == pytest.approx((4 + 2 + 1) / 3)
    assert stats["replay_buffer/added"] == 3


@pytest.fixture(scope="module")
def tiny_learner(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from spiral.engines.loading import ModelConfig
    from spiral.engines.torch.learner import TorchLearner
    from spiral.testing import make_tiny_model

    model = make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
    return TorchLearner(ModelConfig(model=str(model), lora_rank=4, device="cpu", seed=0))


def _datum(tokens: tuple[int, ...], adv: float, version: int, weight: float = 1.0) -> Datum:
    n = len(tokens) - 1
    return Datum(
        input_ids=tokens[:-1],
        target_ids=tokens[1:],
        sampler_logprobs=tuple(-1.0 - 0.1 * i for i in range(n)),
        advantages=(adv,) * n,
        mask=(0.0,) + (1.0,) * (n - 1),
        policy_version=version,
        weight=weight,
    )


def test_one_call_per_staleness_gives_the_gradient_of_one_call(tiny_learner: object) -> None:
    learner = tiny_learner
    datums = [
        _datum((3, 4, 5, 6, 7), 1.0, version=0),
        _datum((3, 4, 9, 10), -0.5, version=0, weight=2.0),
        _datum((3, 8, 5, 6), 0.7, version=-1),  # unknown version: counted as fresh
        _datum((3, 4, 11, 12, 13), -1.2, version=2),  # as fresh as the learner
    ]
    # Two versions behind for the first two rows once the learner is at version 2.
    learner.version = 2  # type: ignore[attr-defined]
    loss = functools.partial(get_loss("ppo"), clip=0.2)
    reg = Regularizer()

    def grads() -> list[torch.Tensor]:
        out = [p.grad.clone() for _, p in learner._named_trainable()]  # type: ignore[attr-defined]
        learner._get_optimizer().zero_grad(set_to_none=True)  # type: ignore[attr-defined]
        return out

    whole = learner.forward_backward(datums, loss, reg)  # type: ignore[attr-defined]
    expected = grads()
    split = forward_backward_by_staleness(learner, datums, loss, reg)  # type: ignore[arg-type]
    got = grads()
    for a, b in zip(expected, got, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    assert split["loss"] == pytest.approx(whole["loss"], rel=1e-5)
    assert split["num_tokens"] == whole["num_tokens"]
    assert split["ratio_mean"] == pytest.approx(whole["ratio_mean"], rel=1e-5)
    # Ratio statistics per staleness: 2 versions behind, and fresh (0).
    assert {"staleness/2/ratio_mean", "staleness/0/ratio_mean"} <= split.keys()
    assert split["staleness/2/num_tokens"] == 3 + 2 * 2  # weights count


def test_fresh_rows_keep_the_plain_metrics(tiny_learner: object) -> None:
    learner = tiny_learner
    learner.version = 0  # type: ignore[attr-defined]
    loss = functools.partial(get_loss("importance_sampling"), clip=0.2)
    metrics = forward_backward_by_staleness(
        learner,  # type: ignore[arg-type]
        [_datum((3, 4, 5), 1.0, version=0)],
        loss,
        Regularizer(),
    )
    learner._get_optimizer().zero_grad(set_to_none=True)  # type: ignore[attr-defined]
    assert not any(k.startswith("staleness/") for k in metrics)
    assert forward_backward_by_staleness(learner, [], loss, Regularizer()) == {}  # type: ignore[arg-type]


def test_async_without_ray_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from spiral.errors import SpiralError
    from spiral.train.actors.worker import ray_module

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(SpiralError, match=r"pip install 'spiral-selfplay\[ray\]'"):
        ray_module()


def test_lr_kl_target_shrinks_a_step_on_rows_far_from_the_weights(tiny_learner: object) -> None:
    from spiral.train.config import parse_config
    from spiral.train.step import update

    learner = tiny_learner
    learner.version = 0  # type: ignore[attr-defined]
    # The rows' sampler log-probs (-1.0, -1.1, ...) are far from the tiny model's (~ -6):
    # approx_kl well above the target.
    datums = [_datum((3, 4, 5, 6, 7), 1.0, version=0)]
    args = ["learning_rate=0.01", "lr_kl_target=0.05"]
    metrics = update(parse_config(args), learner, datums, step=0)  # type: ignore[arg-type]
    assert metrics["approx_kl"] > 0.05
    assert metrics["lr_kl_scale"] == pytest.approx(0.05 / metrics["approx_kl"])
    assert metrics["lr"] == pytest.approx(0.01 * 0.05 / metrics["approx_kl"])
    near = parse_config(["learning_rate=0.01", f"lr_kl_target={metrics['approx_kl'] * 10}"])
    again = update(near, learner, datums, step=0)  # type: ignore[arg-type]
    assert again["lr_kl_scale"] == 1.0 and again["lr"] == 0.01
