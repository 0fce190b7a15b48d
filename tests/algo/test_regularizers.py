"""Entropy and KL over legal moves, checked against numbers worked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from spiral.algo.regularizers import (
    Regularizer,
    entropy_and_kl,
    move_floor_deficit,
    regularizer_loss,
    uniform_magnet,
)

NEG_INF = float("-inf")


def _logp(*probs: float) -> torch.Tensor:
    return torch.tensor([math.log(p) if p > 0 else NEG_INF for p in probs])


def test_entropy_of_a_masked_distribution() -> None:
    # Legal moves 0 and 2 with p = 0.8 / 0.2; token 1 is illegal (-inf).
    logp = _logp(0.8, 0.0, 0.2).unsqueeze(0)
    entropy, kl = entropy_and_kl(logp, None)
    # H = -(0.8 ln 0.8 + 0.2 ln 0.2) = 0.5004024
    assert float(entropy[0]) == pytest.approx(0.5004024, abs=1e-6)
    assert kl is None


def test_kl_to_uniform_over_legal_moves_is_log_n_minus_entropy() -> None:
    logp = _logp(0.8, 0.0, 0.2).unsqueeze(0)
    magnet = uniform_magnet(3, [{0: 1, 2: 1}])
    assert torch.allclose(magnet[0], _logp(0.5, 0.0, 0.5))
    entropy, kl = entropy_and_kl(logp, magnet)
    assert kl is not None
    # KL(p || uniform over 2) = ln 2 - H = 0.6931472 - 0.5004024 = 0.1927448
    assert float(kl[0]) == pytest.approx(0.1927448, abs=1e-6)
    assert float(kl[0]) == pytest.approx(math.log(2) - float(entropy[0]), abs=1e-6)


def test_uniform_magnet_weighs_tokens_by_the_moves_behind_them() -> None:
    # Three legal moves: two continue through token 1, one through token 0.
    magnet = uniform_magnet(4, [{1: 2, 0: 1}, None])
    assert torch.allclose(magnet[0], _logp(1 / 3, 2 / 3, 0.0, 0.0))
    assert torch.allclose(magnet[1], torch.full((4,), -math.log(4)))


def test_kl_to_a_reference_by_hand() -> None:
    logp = _logp(0.5, 0.5).unsqueeze(0)
    reference = _logp(0.9, 0.1).unsqueeze(0)
    _, kl = entropy_and_kl(logp, reference)
    # 0.5 ln(0.5/0.9) + 0.5 ln(0.5/0.1) = 0.5 (-0.5877867 + 1.6094379) = 0.5108256
    assert kl is not None and float(kl[0]) == pytest.approx(0.5108256, abs=1e-6)


def test_loss_is_a_weighted_sum_with_finite_gradients() -> None:
    logits = torch.tensor([[1.0, 0.0, -1.0], [0.0, 0.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[0.0, 0.0, 0.0], [0.0, NEG_INF, 0.0]])
    logp = torch.log_softmax(logits + mask, dim=-1)
    weights = torch.tensor([2.0, 1.0])
    reg = Regularizer(entropy_coef=0.1, kl_coef=0.5, kl_reference="uniform")
    magnet = uniform_magnet(3, [None, {0: 1, 2: 1}])
    loss, diag = regularizer_loss(logp, magnet, weights, reg)
    entropy, kl = entropy_and_kl(logp.detach(), magnet)
    assert kl is not None
    expected = float((weights * (0.5 * kl - 0.1 * entropy)).sum())
    assert float(loss.detach()) == pytest.approx(expected, abs=1e-6)
    # Row 1 is uniform over its two legal moves: H = ln 2, KL = 0.
    assert float(entropy[1]) == pytest.approx(math.log(2)) and float(kl[1]) == pytest.approx(0)
    assert diag["entropy"] == pytest.approx(float((weights * entropy).sum()) / 3.0)
    loss.backward()
    assert logits.grad is not None and bool(torch.isfinite(logits.grad).all())
    # The entropy bonus pushes row 0's top logit down (towards uniform).
    assert float(logits.grad[0, 0]) > 0


def test_regularizer_validates_its_settings() -> None:
    assert not Regularizer().active and Regularizer(entropy_coef=0.1).active
    assert Regularizer(kl_coef=0.1).needs_reference_model
    assert not Regularizer(kl_coef=0.1, kl_reference="uniform").needs_reference_model
    with pytest.raises(ValueError, match=">= 0"):
        Regularizer(entropy_coef=-1.0)
    with pytest.raises(ValueError, match="kl_reference"):
        Regularizer(kl_reference="base")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="magnet"):
        regularizer_loss(
            _logp(0.5, 0.5).unsqueeze(0), None, torch.ones(1), Regularizer(kl_coef=1.0)
        )


def test_move_floor_deficit_by_hand() -> None:
    # Legal moves 0, 2, 3 with p = 0.9 / 0.06 / 0.04; token 1 illegal. Floor 0.1:
    # ln(0.1 / 0.06) + ln(0.1 / 0.04) = 0.5108256 + 0.9162907 = 1.4271164.
    rows = torch.stack([_logp(0.9, 0.0, 0.06, 0.04), _logp(0.5, 0.0, 0.25, 0.25)])
    deficit = move_floor_deficit(rows, 0.1)
    assert float(deficit[0]) == pytest.approx(1.4271164, abs=1e-6)
    assert float(deficit[1]) == 0.0  # every move above the floor
    # Free text (nothing ruled out) has no moves to floor, however small its tokens are.
    assert float(move_floor_deficit(_logp(0.97, 0.01, 0.01, 0.01).unsqueeze(0), 0.1)[0]) == 0.0


def test_move_floor_pull_does_not_vanish_as_a_move_dies() -> None:
    """The floor's gradient on a dying move's logit stays near -coef; the entropy bonus's
    shrinks with the move's probability."""
    illegal = torch.tensor([[0.0, 0.0, NEG_INF]])  # two legal moves, one token ruled out
    for p_small in (1e-2, 1e-4, 1e-6):
        logits = torch.tensor([[math.log(1 - p_small), math.log(p_small), 0.0]], requires_grad=True)
        logp = torch.log_softmax(logits + illegal, dim=-1)
        loss, diag = regularizer_loss(
            logp, None, torch.ones(1), Regularizer(move_floor=0.1, move_floor_coef=0.2)
        )
        loss.backward()
        assert logits.grad is not None
        # d/dz_1 of 0.2 (ln 0.1 - ln p_1) = -0.2 (1 - p_1)
        assert float(logits.grad[0, 1]) == pytest.approx(-0.2 * (1 - p_small), rel=1e-4)
        assert diag["move_floor_deficit"] == pytest.approx(math.log(0.1 / p_small), rel=1e-4)
        entropy_logits = logits.detach().clone().requires_grad_(True)
        bonus, _ = regularizer_loss(
            torch.log_softmax(entropy_logits + illegal, dim=-1), None, torch.ones(1),
            Regularizer(entropy_coef=0.2),
        )  # fmt: skip
        bonus.backward()
        assert entropy_logits.grad is not None
        assert abs(float(entropy_logits.grad[0, 1])) < 0.2 * 20 * p_small


def test_move_floor_settings() -> None:
    assert Regularizer(move_floor=0.1, move_floor_coef=0.2).active
    assert not Regularizer(move_floor=0.1).active  # no weight: off
    with pytest.raises(ValueError, match="move_floor"):
        Regularizer(move_floor=1.0, move_floor_coef=0.2)
    for coef in (-0.2, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite and >= 0"):
            Regularizer(move_floor=0.1, move_floor_coef=coef)
