"""Private-information centering: hand-worked offsets, the exact change of the update in
logit space, and the rows it must leave alone."""

from __future__ import annotations

import numpy as np
import pytest

from spiral.algo.assemble import assemble
from spiral.algo.private_centering import private_centering_offsets
from spiral.types import Completion, Episode, Turn

# One public state; J: bet +1, check -1; K: bet +2, bet +2, check 0.
PUBLIC = ["h"] * 5
PRIVATE = ["J", "J", "K", "K", "K"]
ACTION = ["b", "p", "b", "b", "p"]
ADV = [1.0, -1.0, 2.0, 2.0, 0.0]


def test_hand_worked_offsets() -> None:
    # G_J = (b: 1 - 1/2 * 0, p: -1 - 1/2 * 0) = (1, -1)
    # G_K = (b: 4 - 2/3 * 4, p: 0 - 1/3 * 4) = (4/3, -4/3)
    # mean G = (7/6, -7/6); offset of a row of (c, a) = -beta * mean G(a) / n_c(a)
    offsets = private_centering_offsets(PUBLIC, PRIVATE, ACTION, ADV, beta=0.5)
    assert offsets == pytest.approx([-7 / 12, 7 / 12, -7 / 24, -7 / 24, 7 / 12])


def _logit_gradient(private: str, advantages: list[float], pi: np.ndarray) -> np.ndarray:
    """sum over the rows of state `private` of A * (e_a - pi): the policy gradient with
    respect to that state's two action logits (b, p)."""
    g = np.zeros(2)
    for c, a, adv in zip(PRIVATE, ACTION, advantages, strict=True):
        if c == private:
            g += adv * (np.eye(2)[0 if a == "b" else 1] - pi)
    return g


@pytest.mark.parametrize("p_bet", [0.1, 0.5, 0.93])
def test_update_changes_by_exactly_the_shared_part(p_bet: float) -> None:
    """Whatever the policy's true probabilities, each state's logit gradient moves by
    -beta * the mean over the states of the count-estimated gradients."""
    pi = np.array([p_bet, 1 - p_bet])
    beta = 0.8
    offsets = private_centering_offsets(PUBLIC, PRIVATE, ACTION, ADV, beta)
    centred = [a + o for a, o in zip(ADV, offsets, strict=True)]
    shared = np.array([7 / 6, -7 / 6])
    for c in ("J", "K"):
        before = _logit_gradient(c, ADV, pi)
        after = _logit_gradient(c, centred, pi)
        assert after - before == pytest.approx(-beta * shared)


def test_rows_left_alone() -> None:
    # beta 0; a public state with one private information; advantages already opposite.
    assert private_centering_offsets(PUBLIC, PRIVATE, ACTION, ADV, 0.0) == [0.0] * 5
    assert (
        private_centering_offsets(["h"] * 3, ["J"] * 3, ["b", "p", "b"], [1, 2, 3], 0.9)
        == [0.0] * 3
    )
    # J and K pull in opposite directions with equal strength: nothing is shared.
    opposite = private_centering_offsets(
        ["h"] * 4, ["J", "J", "K", "K"], list("bpbp"), [1, -1, -1, 1], 0.9
    )
    assert opposite == pytest.approx([0.0] * 4)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        private_centering_offsets(PUBLIC, PRIVATE, ACTION, ADV, 1.0)
    with pytest.raises(ValueError, match="one of each per row"):
        private_centering_offsets(PUBLIC, PRIVATE, ACTION[:-1], ADV, 0.5)


def _kuhn_episode(card_prompt: tuple[int, ...], move: str, token: int, ret: float) -> Episode:
    """A one-turn episode of seat 0 (the opponent's turn is scripted)."""
    turn = Turn(
        "Kuhn", 0, "policy", "obs", card_prompt, Completion((token,), (-0.7,), "stop", move)
    )
    other = Turn("Kuhn", 1, "random", "obs")
    return Episode("Kuhn", 0, (turn, other), (ret, -ret), "win", moves=(move, "fold"))


def test_assemble_centres_over_the_prompts_of_one_public_state() -> None:
    """Two prompts (cards) at the opening state: the datums carry advantage + offset."""
    episodes = [
        _kuhn_episode((1, 2, 11), "bet", 50, 1.0),  # J bets
        _kuhn_episode((1, 2, 11), "check", 51, -1.0),  # J checks
        _kuhn_episode((1, 2, 13), "bet", 50, 2.0),  # K bets
        _kuhn_episode((1, 2, 13), "bet", 50, 2.0),
        _kuhn_episode((1, 2, 13), "check", 51, 0.0),  # K checks
    ]
    advantages = {(i, 0): ep.returns[0] for i, ep in enumerate(episodes)}
    datums, metrics = assemble(episodes, advantages, private_centering=0.5)
    expected = [1 - 7 / 12, -1 + 7 / 12, 2 - 7 / 24, 2 - 7 / 24, 7 / 12]
    assert [d.advantages[-1] for d in datums] == pytest.approx(expected)
    assert metrics["centering_mean_abs_offset"] == pytest.approx((7 / 12 * 3 + 7 / 24 * 2) / 5)
    plain, plain_metrics = assemble(episodes, advantages)
    assert [d.advantages[-1] for d in plain] == [1.0, -1.0, 2.0, 2.0, 0.0]
    assert "centering_mean_abs_offset" not in plain_metrics
