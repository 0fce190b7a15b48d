"""Full-width updates in the shared-parameter Kuhn twin: the policy gradient against the
NeuRD form (each legal move's logit moved by its regularised advantage, the softmax's
Jacobian left out), exact values, no sampling noise.

    python docs/results/kuhn-full-width/twin-neurd/kuhn_twin_neurd.py [OUT_DIR]

The twin (`docs/results/kuhn-centering/kuhn_shared_twin.py`): logits `features @ theta`,
the cards of one history sharing their features (cosine 0.995), the two seats' decisions
of one kind tied (cosine 0.92) and, with `ordinal`, the cards in rank order along one
direction per history, as a language model knows them; `theta` trained by Adam. Per
information state I with reach R(I) and the acting seat's move values Q(I, a):

- "pg": the exact expected policy gradient, R x pi(a) x (Q(a) - V), plus the entropy
  bonus and the KL to the magnet through the softmax's Jacobian (what sampled rows, and
  full width's default rows, give);
- "neurd_pg": NeuRD on the chips, R x (Q(a) - mean_b Q(b)), the regulariser as in "pg";
- "neurd": R x (Q'(a) - mean_b Q'(b)), Q'(a) = Q(a) - tau log pi(a) - lam log(pi(a) /
  magnet(a)): magnetic mirror descent on the logits (Neural Replicator Dynamics with the
  regulariser in the values, R-NaD's and MMD's update), whose pull on a move does not
  vanish as its probability goes to 0 or 1.

Writes OUT_DIR/runs.jsonl and OUT_DIR/table.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

# the twin's modules, kept with the centering results
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kuhn-centering"))
from kuhn_shared_twin import (  # noqa: E402
    _index,
    action_values,
    exploitability,
    features,
    logit_gradient,
)
from kuhn_tabular_twin import _softmax, write_table  # noqa: E402

SEEDS = range(6)
J_BLUFF = _index(0, "p")


def neurd_gradient(pi: np.ndarray, magnet: np.ndarray, tau: float, lam: float) -> np.ndarray:
    reach_w, q = action_values(pi)
    log_pi = np.log(pi)
    q_reg = q - tau * log_pi - lam * (log_pi - np.log(magnet))
    return reach_w[:, None] * (q_reg - q_reg.mean(-1, keepdims=True))


def neurd_pg_gradient(pi: np.ndarray, magnet: np.ndarray, tau: float, lam: float) -> np.ndarray:
    """NeuRD on the chips only; the regulariser through the softmax's Jacobian."""
    reg = logit_gradient(pi, magnet, tau, lam, 0.0, "pg") - logit_gradient(
        pi, magnet, 0.0, 0.0, 0.0, "pg"
    )
    return neurd_gradient(pi, magnet, 0.0, 0.0) + reg


def run(
    mode: str,
    lr: float,
    tau: float,
    lam: float,
    ordinal: float,
    seed: int,
    steps: int = 400,
    magnet_every: int = 20,
) -> dict:
    phi = features(0.07, seed, 0.3, ordinal)
    theta = np.zeros((phi.shape[1], 2))
    m, v = np.zeros_like(theta), np.zeros_like(theta)
    magnet = _softmax(phi @ theta)
    curve = []
    for step in range(1, steps + 1):
        pi = _softmax(phi @ theta)
        if magnet_every and step % magnet_every == 1:
            magnet = pi
        if mode == "pg":
            g_logits = logit_gradient(pi, magnet, tau, lam, 0.0, "pg")
        elif mode == "neurd_pg":
            g_logits = neurd_pg_gradient(pi, magnet, tau, lam)
        else:
            g_logits = neurd_gradient(pi, magnet, tau, lam)
        g = phi.T @ g_logits
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        m_hat, v_hat = m / (1 - 0.9**step), v / (1 - 0.999**step)
        theta = theta + lr * m_hat / (np.sqrt(v_hat) + 1e-8)
        if step % 10 == 0:
            curve.append((step, exploitability(_softmax(phi @ theta))))
    final = _softmax(phi @ theta)
    return {
        "mode": mode,
        "lr": lr,
        "tau": tau,
        "lam": lam,
        "ordinal": ordinal,
        "seed": seed,
        "final_exploitability": curve[-1][1],
        "max_last_quarter": max(e for s, e in curve if s > 0.75 * steps),
        "j_bluff": float(final[J_BLUFF, 1]),
        "curve": curve,
    }


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "kuhn-twin-neurd")
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        "Shared-parameter Kuhn twin, exact full-width updates, Adam, 400 updates, the "
        "magnet refreshed every 20; cards cosine 0.995, seats tied (cosine 0.92); six "
        "random bases per row.",
        "",
        "| update | lr | entropy | KL | cards in rank order | final (mean ± sd) | worst | "
        "max, last quarter | J's bluff after a check (Nash 1/3) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    grid = [
        (mode, lr, tau, lam, ordinal)
        for ordinal in (0.0, 3.0, 7.0)
        for mode in ("pg", "neurd", "neurd_pg")
        for lr in (0.1, 0.03)
        for tau, lam in ((0.1, 0.6), (0.05, 0.6), (0.05, 0.2))
    ]
    with (out / "runs.jsonl").open("w") as f:
        for mode, lr, tau, lam, ordinal in grid:
            runs = [run(mode, lr, tau, lam, ordinal, s) for s in SEEDS]
            for r in runs:
                f.write(json.dumps(r) + "\n")
            final = np.array([r["final_exploitability"] for r in runs])
            worst_quarter = max(r["max_last_quarter"] for r in runs)
            bluffs = " ".join(f"{r['j_bluff']:.2f}" for r in runs)
            lines.append(
                f"| {mode} | {lr} | {tau} | {lam} | {ordinal:g} | {final.mean():.3f} ± "
                f"{final.std(ddof=1):.3f} | {final.max():.3f} | {worst_quarter:.3f} | {bluffs} |"
            )
            print(lines[-1], flush=True)
    write_table(out, lines)


if __name__ == "__main__":
    main()
