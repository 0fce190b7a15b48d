"""Losses: values and gradients worked by hand at and across PPO's clip boundary."""

from __future__ import annotations

import math

import pytest
import torch

from spiral.algo.losses import LOSSES, get_loss, importance_sampling_loss, ppo_loss


def _inputs(
    ratios: list[float], advantages: list[float], mask: list[float] | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    # Non-zero sampler log-probs so that the ratio really is exp(new - old).
    old_T = torch.tensor([-1.0 - 0.5 * i for i in range(len(ratios))], dtype=torch.float64)
    new_T = (old_T + torch.log(torch.tensor(ratios, dtype=torch.float64))).requires_grad_(True)
    adv_T = torch.tensor(advantages, dtype=torch.float64)
    mask_T = torch.ones_like(adv_T) if mask is None else torch.tensor(mask, dtype=torch.float64)
    return new_T, old_T, adv_T, mask_T


@pytest.mark.parametrize(
    ("ratio", "adv", "expected_loss", "clipped"),
    [
        (1.1, 1.0, -1.1, False),  # inside the band
        (1.5, 1.0, -1.2, True),  # A > 0 above 1 + eps: capped at 1.2
        (0.5, 1.0, -0.5, False),  # A > 0 below 1 - eps: not capped (pessimistic bound)
        (0.5, -1.0, 0.8, True),  # A < 0 below 1 - eps: floored at 0.8
        (1.5, -1.0, 1.5, False),  # A < 0 above 1 + eps: not capped
        (1.2 + 1e-3, 2.0, -2.4, True),  # just across the upper boundary
        (1.2 - 1e-3, 2.0, -2.0 * (1.2 - 1e-3), False),  # just inside it
        (0.8 - 1e-3, -2.0, 1.6, True),  # just across the lower boundary, A < 0
    ],
)
def test_ppo_single_token(ratio: float, adv: float, expected_loss: float, clipped: bool) -> None:
    new_T, old_T, adv_T, mask_T = _inputs([ratio], [adv])
    loss, diag = ppo_loss(new_T, old_T, adv_T, mask_T, clip=0.2)
    assert loss.item() == pytest.approx(expected_loss)
    assert diag["clip_frac"] == (1.0 if clipped else 0.0)
    loss.backward()
    assert new_T.grad is not None
    # d(-r A)/d(log r) = -r A where the unclipped branch is active, 0 where clipped.
    expected_grad = 0.0 if clipped else -ratio * adv
    assert float(new_T.grad[0]) == pytest.approx(expected_grad)


def test_importance_sampling_is_unclipped() -> None:
    new_T, old_T, adv_T, mask_T = _inputs([1.5, 0.5], [1.0, -1.0])
    loss, diag = importance_sampling_loss(new_T, old_T, adv_T, mask_T)
    # -(1.5 * 1 + 0.5 * -1) = -1.0
    assert loss.item() == pytest.approx(-1.0)
    loss.backward()
    assert new_T.grad is not None
    assert new_T.grad.tolist() == pytest.approx([-1.5, 0.5])
    # Both tokens would be clipped by PPO; the diagnostic says so.
    assert diag["clip_frac"] == 1.0


def test_diagnostics_by_hand() -> None:
    new_T, old_T, adv_T, mask_T = _inputs([1.5, 0.5], [1.0, -1.0])
    _, diag = ppo_loss(new_T, old_T, adv_T, mask_T)
    log_r = [math.log(1.5), math.log(0.5)]
    assert diag["ratio_mean"] == pytest.approx(1.0)
    assert diag["ratio_min"] == pytest.approx(0.5)
    assert diag["ratio_max"] == pytest.approx(1.5)
    assert diag["approx_kl"] == pytest.approx(((0.5 - log_r[0]) + (-0.5 - log_r[1])) / 2)
    assert diag["approx_kl"] == pytest.approx(0.1438410362)
    assert diag["kl_sample_train_v1"] == pytest.approx(-(log_r[0] + log_r[1]) / 2)
    assert diag["kl_sample_train_v2"] == pytest.approx(0.5 * (log_r[0] ** 2 + log_r[1] ** 2) / 2)
    assert diag["num_tokens"] == 2.0


def test_is_equals_ppo_inside_the_band() -> None:
    gen = torch.Generator().manual_seed(0)
    n = 32
    log_r = (torch.rand(n, generator=gen, dtype=torch.float64) - 0.5) * 0.3  # |log r| < 0.15
    old_T = -torch.rand(n, generator=gen, dtype=torch.float64) * 3
    adv_T = torch.randn(n, generator=gen, dtype=torch.float64)
    mask_T = (torch.rand(n, generator=gen) > 0.3).double()
    losses, grads = [], []
    for fn in (importance_sampling_loss, ppo_loss):
        new_T = (old_T + log_r).requires_grad_(True)
        loss, diag = fn(new_T, old_T, adv_T, mask_T)
        loss.backward()
        assert new_T.grad is not None and diag["clip_frac"] == 0.0
        losses.append(loss.item())
        grads.append(new_T.grad)
    assert losses[0] == pytest.approx(losses[1])
    assert torch.allclose(grads[0], grads[1])


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_mask_is_respected(name: str) -> None:
    loss_fn = get_loss(name)
    # The masked token has an absurd log-ratio (e^100); it must change nothing.
    old_T = torch.tensor([-1.0, -50.0, -2.0], dtype=torch.float64)
    new_T = torch.tensor([-1.0, 50.0, -2.0], dtype=torch.float64, requires_grad=True)
    adv_T = torch.tensor([1.0, 5.0, -1.0], dtype=torch.float64)
    mask_T = torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64)
    loss, diag = loss_fn(new_T, old_T, adv_T, mask_T)
    loss.backward()
    assert new_T.grad is not None
    assert loss.item() == pytest.approx(0.0)  # -(1 * 1 + 1 * -1)
    assert new_T.grad.tolist() == pytest.approx([-1.0, 0.0, 1.0])
    assert diag["ratio_max"] == pytest.approx(1.0)
    assert diag["num_tokens"] == 2.0


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_empty_mask_is_safe(name: str) -> None:
    new_T = torch.tensor([-1.0, -3.0], requires_grad=True)
    loss, diag = get_loss(name)(new_T, torch.zeros(2), torch.ones(2), torch.zeros(2))
    loss.backward()
    assert loss.item() == 0.0
    assert new_T.grad is not None and new_T.grad.tolist() == [0.0, 0.0]
    assert diag["ratio_mean"] == 1.0 and diag["clip_frac"] == 0.0 and diag["num_tokens"] == 0.0
    assert all(math.isfinite(v) for v in diag.values())


def test_loss_is_a_sum_over_a_batch_shape() -> None:
    new_T, old_T, adv_T, _ = _inputs([1.1, 0.9, 1.0, 1.05], [1.0, 1.0, -1.0, 2.0])
    shape = (2, 2)
    loss, _ = importance_sampling_loss(
        new_T.view(shape), old_T.view(shape), adv_T.view(shape), torch.ones(shape)
    )
    assert loss.item() == pytest.approx(-(1.1 + 0.9 - 1.0 + 2.1))


def test_shape_mismatch_and_unknown_name_fail_loudly() -> None:
    with pytest.raises(ValueError, match="share one shape"):
        ppo_loss(torch.zeros(2), torch.zeros(3), torch.zeros(2), torch.ones(2))
    with pytest.raises(KeyError, match="importance_sampling"):
        get_loss("grpo")
    with pytest.raises(ValueError, match="clip"):
        ppo_loss(torch.zeros(1), torch.zeros(1), torch.zeros(1), torch.ones(1), clip=1.5)


def test_combined_diagnostics_by_hand() -> None:
    from spiral.algo.losses import combine_diagnostics

    parts = [
        {"loss": 1.0, "num_tokens": 3.0, "ratio_mean": 1.0, "ratio_min": 0.9, "ratio_max": 1.1},
        {"loss": -0.5, "num_tokens": 1.0, "ratio_mean": 2.0, "ratio_min": 0.5, "ratio_max": 3.0},
    ]
    got = combine_diagnostics(parts)
    assert got == {
        "loss": 0.5,
        "num_tokens": 4.0,
        "ratio_mean": (3 * 1.0 + 1 * 2.0) / 4,
        "ratio_min": 0.5,
        "ratio_max": 3.0,
    }
    assert combine_diagnostics([]) == {}
