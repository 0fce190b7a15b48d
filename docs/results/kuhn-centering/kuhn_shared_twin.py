"""A twin of the learner's update on single-hand Kuhn poker whose parameters are SHARED
between the cards, as a language model's are, to test private-information centering.

    python docs/results/kuhn-centering/kuhn_shared_twin.py [OUT_DIR]

The model measured that its gradients for the three cards at one betting history point
the same way (cosine 0.993-0.997): the update moves every card's policy together, and the
card-dependent part that would leave the card-blind plateau is a small residual. Here the
logits are `features @ theta`, where the features of (card, history) are a history part
shared by the cards plus a card-and-history part `eps` times smaller, rotated into a dense
basis (so no parameter belongs to one card alone), cosine 1 / (1 + eps^2) between the
cards of one history; `theta` is trained by Adam on the exact expected gradient of the
regularised objective (chips, entropy bonus, reverse KL to a snapshot magnet refreshed
every 20 updates), the same terms as `kuhn_tabular_twin.py` beside it.

Centering with `beta`: each information state's action values are replaced by
Q(a) - beta * M(history, a), where M is the mean of Q(a) over the cards at that history,
weighted by how often each card takes the action there (what the rows of one public state
and one action carry, in expectation). The update's component shared by the cards of a
history is scaled by (1 - beta); the part that differs between cards is kept.

Writes OUT_DIR/runs.jsonl (one row per (beta, eps, lr)), OUT_DIR/table.md and
OUT_DIR/curves.png.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from kuhn_tabular_twin import DEALS, HISTORIES, _index, _payoff0, _softmax, write_table

from spiral.analysis.exploitability import KUHN_CARDS, kuhn_exploitability
from spiral.analysis.iterate_average import table_policy

TERMINAL = ("pp", "bp", "bb", "pbp", "pbb")
STEPS, EVERY, MAGNET_EVERY, DIM = 400, 10, 20, 32


def action_values(pi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per information state: its reach weight R (chance x both seats' reach) and the
    acting seat's expected chips Q(a) after each move."""
    reach_w = np.zeros(12)
    q_sum = np.zeros((12, 2))

    def value0(h: str, reach: tuple[float, float], cards: tuple[int, int]) -> float:
        if h in TERMINAL:
            return _payoff0(h, cards)
        seat = len(h) % 2
        i = _index(cards[seat], h)
        q0 = np.zeros(2)
        for k, m in enumerate("pb"):
            nxt = (reach[0] * pi[i, k], reach[1]) if seat == 0 else (reach[0], reach[1] * pi[i, k])
            q0[k] = value0(h + m, nxt, cards)
        w = reach[0] * reach[1] / len(DEALS)
        reach_w[i] += w
        q_sum[i] += w * (1.0 if seat == 0 else -1.0) * q0
        return float(pi[i] @ q0)

    for cards in DEALS:
        value0("", (1.0, 1.0), cards)
    q = q_sum / np.maximum(reach_w, 1e-30)[:, None]
    return reach_w, q


def logit_gradient(
    pi: np.ndarray,
    magnet: np.ndarray,
    tau: float,
    lam: float,
    beta: float,
    mode: str,
    noise: tuple[np.ndarray, int] | None = None,
    floor: tuple[float, float] = (0.0, 0.0),
) -> np.ndarray:
    """Ascent direction on the logits: policy gradient + entropy - KL, centred by `mode`:
    "values" subtracts beta x the cards' mean action value Q(a) (biased: the shared part of
    the values is part of the game), "pg" (what `private_centering` does) subtracts beta x
    the cards' mean policy-gradient logit gradient, "pg_entropy" that of the policy
    gradient and the entropy bonus together (the bonus is the policy gradient of a reward
    -tau log pi(a), so rows can carry it), "full" the mean of the whole ascent direction
    (a preconditioner: the fixed points stay). `noise` (12 standard normals, games), where
    given, adds a sampled batch's error to the policy gradient before any centering.
    `floor` = (coef, p_min) adds the move floor (`spiral.algo.regularizers.move_floor`):
    coef x log(pi(a) / p_min) for every move below p_min, reach-weighted."""
    if mode not in ("values", "pg", "pg_entropy", "full"):
        raise ValueError(f"unknown centering mode {mode!r}: values, pg, pg_entropy or full")
    reach_w, q = action_values(pi)
    if mode == "values":
        q = q - beta * _card_mean(q, reach_w[:, None] * pi)
    pg = reach_w[:, None] * pi * (q - (pi * q).sum(-1, keepdims=True))
    if noise is not None:
        pg = pg + pg_noise(reach_w, pi, *noise)
    if mode == "pg":
        pg = pg - beta * _card_mean(pg, np.ones_like(pg))
    log_pi, log_mu = np.log(pi), np.log(magnet)
    entropy = -(pi * log_pi).sum(-1, keepdims=True)
    kl = (pi * (log_pi - log_mu)).sum(-1, keepdims=True)
    bonus = reach_w[:, None] * tau * -pi * (log_pi + entropy)
    if mode == "pg_entropy":
        pg = pg + bonus - beta * _card_mean(pg + bonus, np.ones_like(pg))
        bonus = np.zeros_like(bonus)
    reg = bonus - reach_w[:, None] * lam * pi * (log_pi - log_mu - kl)
    coef, p_min = floor
    if coef > 0:  # d/dz log pi(a) = onehot(a) - pi, for each move a under the floor
        below = pi < p_min
        reg = reg + reach_w[:, None] * coef * (below - below.sum(-1, keepdims=True) * pi)
    grad = pg + reg
    if mode == "full":
        grad = grad - beta * _card_mean(grad, np.ones_like(grad))
    return grad


ADVANTAGE_STD = 1.3  # the model's adv_std on Kuhn


def pg_noise(reach_w: np.ndarray, pi: np.ndarray, z: np.ndarray, games: int) -> np.ndarray:
    """The error of the policy gradient estimated from `games` sampled games: at a state
    visited with probability R, the logit gradient of one visit is (onehot(a) - pi) x A, of
    variance pi0 pi1 ADVANTAGE_STD^2 per logit, so the batch mean errs by
    ADVANTAGE_STD x sqrt(R pi0 pi1 / games), opposite on the two logits."""
    std = ADVANTAGE_STD * np.sqrt(reach_w * pi[:, 0] * pi[:, 1] / games)
    return np.stack([-std * z, std * z], axis=-1)


def _card_mean(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per history, the weighted mean of `values` over the three cards, on every card's row."""
    out = np.zeros_like(values)
    for h in HISTORIES:
        rows = [_index(c, h) for c in range(3)]
        w = weights[rows]
        out[rows] = (w * values[rows]).sum(0) / np.maximum(w.sum(0), 1e-30)
    return out


def features(
    eps: float, seed: int = 0, seat_tie: float | None = None, ordinal: float = 0.0
) -> np.ndarray:
    """12 x DIM: [one-hot history, eps * one-hot (card, history)] in a random dense basis.

    With `seat_tie` = d, the two seats' decisions of one kind (to bet or check: "" and
    "p"; to call or fold: "pb" and "b") also share their features: a history's part is
    one-hot(kind) + d * one-hot(history), a card's part eps * (one-hot(card, kind) + d *
    one-hot(card, history)), so a card's first-mover and second-mover rows have cosine
    1 / (1 + d^2) and an update for one seat moves the other's play of the card.

    With `ordinal` = o, each history also has a direction along which the cards lie in
    rank order (J at -eps x o, Q at 0, K at +eps x o), a random unit vector of the whole
    space (so it overlaps the other histories' and the seats' features, as a language
    model's sense that J < Q < K is not confined to one decision): an update that makes K
    bet more at one history moves J's and K's play apart at the others too. Kuhn's
    equilibrium is not monotone in the card where it bluffs (J bets, Q checks, K bets).
    Rank directions orthogonal to everything else leave the twin as it was, whatever
    their length (docs/log.md)."""
    raw = np.zeros((12, 4 + 12 + 2 + 6))
    for c in range(3):
        for j, h in enumerate(HISTORIES):
            i, kind = _index(c, h), int(h.endswith("b"))
            if seat_tie is None:
                raw[i, j], raw[i, 4 + i] = 1.0, eps
            else:
                raw[i, j], raw[i, 4 + i] = seat_tie, eps * seat_tie
                raw[i, 16 + kind], raw[i, 18 + 2 * c + kind] = 1.0, eps
    rotation, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(DIM, DIM)))
    phi = raw @ rotation[: raw.shape[1]]
    if ordinal:
        rank = np.random.default_rng(100 + seed).normal(size=(4, DIM))
        rank /= np.linalg.norm(rank, axis=1, keepdims=True)
        for c in range(3):
            for j, h in enumerate(HISTORIES):
                phi[_index(c, h)] += eps * ordinal * (c - 1) * rank[j]
    return phi


def exploitability(pi: np.ndarray) -> float:
    t = {KUHN_CARDS[c] + h: float(pi[_index(c, h), 1]) for c in range(3) for h in HISTORIES}
    return kuhn_exploitability(table_policy(t))["exploitability"]


def run(
    mode: str,
    beta: float | Callable[[int], float],
    eps: float,
    lr: float | Callable[[int], float],
    tau: float = 0.1,
    lam: float | Callable[[int], float] = 0.6,
    seed: int = 0,
    steps: int = STEPS,
    games: int = 0,
    seat_tie: float | None = None,
    floor: tuple[float, float] = (0.0, 0.0),
    ordinal: float = 0.0,
) -> dict:
    """One run; `beta`, `lam` and `lr` may be functions of the update (1-based), for
    schedules (`kuhn_twin_schedules.py`); `games` > 0 adds the error of a batch of that
    many sampled games to each update (`pg_noise`, seeded by `seed`)."""
    beta_at = beta if callable(beta) else (lambda _: beta)
    lam_at = lam if callable(lam) else (lambda _: lam)
    lr_at = lr if callable(lr) else (lambda _: lr)
    rng = np.random.default_rng(1000 + seed)
    phi = features(eps, seed, seat_tie, ordinal)
    theta = np.zeros((DIM, 2))
    m, v = np.zeros_like(theta), np.zeros_like(theta)
    magnet = _softmax(phi @ theta)
    curve = []
    for step in range(1, steps + 1):
        pi = _softmax(phi @ theta)
        if step % MAGNET_EVERY == 1:
            magnet = pi
        noise = (rng.standard_normal(12), games) if games else None
        g = phi.T @ logit_gradient(pi, magnet, tau, lam_at(step), beta_at(step), mode, noise, floor)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        m_hat, v_hat = m / (1 - 0.9**step), v / (1 - 0.999**step)
        theta = theta + lr_at(step) * m_hat / (np.sqrt(v_hat) + 1e-8)
        if step % EVERY == 0:
            curve.append((step, exploitability(_softmax(phi @ theta))))
    escape = next((s for s, e in curve if e < 0.2), None)
    return {
        "mode": mode,
        "beta": beta if not callable(beta) else None,
        "seed": seed,
        "eps": eps,
        "cosine": 1 / (1 + eps**2),
        "lr": lr if not callable(lr) else None,
        "games": games,
        "seat_tie": seat_tie,
        "ordinal": ordinal,
        "floor": list(floor),
        "tau": tau,
        "lam": lam if not callable(lam) else None,
        "first_below_0.2": escape,
        "final_exploitability": curve[-1][1],
        "final_policy": _softmax(phi @ theta)[:, 1].round(4).tolist(),
        "mean_last_quarter": float(np.mean([e for s, e in curve if s > 0.75 * steps])),
        "curve": curve,
    }


SETTINGS = [  # (mode, beta); beta 0 is the plain update
    ("pg", 0.0),
    *[(mode, beta) for mode in ("values", "pg", "full") for beta in (0.5, 0.8, 0.95)],
]


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "kuhn-shared-twin")
    out.mkdir(parents=True, exist_ok=True)
    runs = [
        run(mode, beta, eps, lr, seed=seed)
        for eps in (0.07, 0.2)
        for lr in (0.01, 0.03, 0.1)
        for mode, beta in SETTINGS
        for seed in (0, 1, 2)
    ]
    with (out / "runs.jsonl").open("w") as f:
        for r in runs:
            f.write(json.dumps(r) + "\n")
    lines = [
        f"Shared-parameter Kuhn twin, Adam, {STEPS} updates, entropy 0.1, KL 0.6 to a "
        f"snapshot refreshed every {MAGNET_EVERY}; mean over 3 random bases of the features "
        "(the first update below 0.2: median, '-' where most never got there).",
        "",
        "| cosine between cards | lr | centering | beta | first update below 0.2 | final | "
        "mean, last quarter |",
        "|---|---|---|---|---|---|---|",
    ]
    for i in range(0, len(runs), 3):
        group = runs[i : i + 3]
        r = group[0]
        escapes = sorted(g["first_below_0.2"] or 10**9 for g in group)
        escape = "-" if escapes[1] == 10**9 else str(escapes[1])
        label = "none" if r["beta"] == 0 else r["mode"]
        lines.append(
            f"| {r['cosine']:.3f} | {r['lr']} | {label} | {r['beta']} | {escape} | "
            f"{np.mean([g['final_exploitability'] for g in group]):.3f} | "
            f"{np.mean([g['mean_last_quarter'] for g in group]):.3f} |"
        )
    plt = write_table(out, lines)
    if plt is None:
        return
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), sharey=True)
    for ax, mode in zip(axes, ("values", "pg", "full"), strict=True):
        for r in runs:
            shown = r["eps"] == 0.07 and r["lr"] == 0.1 and r["seed"] == 0
            if shown and (r["beta"] == 0 or r["mode"] == mode):
                steps, values = zip(*r["curve"], strict=True)
                ax.plot(steps, values, label=f"beta {r['beta']}")
        ax.set_title(f"centering '{mode}', cosine 0.995, Adam lr 0.1")
        ax.set_xlabel("update")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("exploitability")
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=120)


if __name__ == "__main__":
    main()
