"""Centering and magnet schedules in the shared-parameter Kuhn twin
(`kuhn_shared_twin.py` beside it): which `private_centering` (beta) and KL weight (lam) over
the run leave the card-blind plateau and end nearest the equilibrium.

    python docs/results/kuhn-centering/kuhn_twin_schedules.py [OUT_DIR]

Cosine 0.995 between the cards, Adam lr 0.1, entropy 0.1, the snapshot magnet refreshed
every 20 updates, 400 updates, 3 random bases. A schedule "a -> b" moves linearly from a
at the first update to b at the last, as the training loop's `*_final` keys do. Also the
centering of the policy gradient and entropy bonus together (`pg_entropy`). The last
rows add the error of a sampled batch of 384 games (the preset's 768 seat-trajectories)
(`kuhn_shared_twin.pg_noise`) and vary the learning rate: "step" drops it to 0.3x at
update 100, as the preset does at step 30 of 120. The final rows tie the two seats'
play of a card as well (`seat_tie`: the model's first-mover and second-mover
probabilities for a card differ by 0.01-0.06 once trained). Writes OUT_DIR/schedules.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from kuhn_shared_twin import STEPS, run

Schedule = Callable[[int], float]


def fixed(value: float) -> Schedule:
    return lambda _: value


def linear(start: float, end: float) -> Schedule:
    return lambda step: start + (end - start) * (step - 1) / (STEPS - 1)


def stepped(value: float, at: int, factor: float) -> Schedule:
    return lambda step: value if step < at else value * factor


FADE, RAMP = linear(0.95, 0.5), linear(0.0, 0.6)
PRESET_LR = stepped(0.1, 100, 0.3)  # the preset's drop to 0.3x a quarter into the run
NOISY: list[tuple[str, Schedule, int]] = [  # (label, lr, games) with the fade and the ramp
    ("exact; lr 0.1 -> 0.03 at update 100", PRESET_LR, 0),
    ("384 games; lr 0.1", fixed(0.1), 384),
    ("384 games; lr 0.1 -> 0.03 at update 100", PRESET_LR, 384),
    ("384 games; lr 0.1 -> 0.01 linearly", linear(0.1, 0.01), 384),
    ("384 games; lr 0.03", fixed(0.03), 384),
    ("96 games; lr 0.1", fixed(0.1), 96),
]

SEAT_TIES: list[tuple[str, float]] = [  # (label, seat_tie d): seats' cosine 1 / (1 + d^2)
    ("seats tied, cosine 0.5", 1.0),
    ("seats tied, cosine 0.92", 0.3),
    ("seats tied, cosine 0.99", 0.1),
]

CASES: list[tuple[str, str, Schedule, Schedule]] = [  # (label, mode, beta, lam)
    ("none; lam 0.6", "pg", fixed(0.0), fixed(0.6)),
    ("beta 0.8; lam 0.6", "pg", fixed(0.8), fixed(0.6)),
    ("beta 0.8 over pg + entropy; lam 0.6", "pg_entropy", fixed(0.8), fixed(0.6)),
    ("beta 0.8 over the whole direction; lam 0.6", "full", fixed(0.8), fixed(0.6)),
    ("beta 0.8; lam 0.12", "pg", fixed(0.8), fixed(0.12)),
    ("beta 0.8; lam 0 -> 0.6 (the preset's ramp)", "pg", fixed(0.8), linear(0.0, 0.6)),
    ("beta 0.95; lam 0.6", "pg", fixed(0.95), fixed(0.6)),
    ("beta 0.95; lam 0.12", "pg", fixed(0.95), fixed(0.12)),
    ("beta 0.95; lam 0 -> 0.6", "pg", fixed(0.95), linear(0.0, 0.6)),
    ("beta 0.95 -> 0.5; lam 0 -> 0.6", "pg", FADE, RAMP),
    ("beta 0.95 -> 0; lam 0 -> 0.6", "pg", linear(0.95, 0.0), linear(0.0, 0.6)),
]


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "kuhn-twin-schedules")
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        "Shared-parameter Kuhn twin (cosine 0.995, Adam lr 0.1, entropy 0.1, magnet every "
        f"20 updates, {STEPS} updates), mean over 3 random bases.",
        "",
        "| centering and KL weight | first update below 0.2 (per basis) | final | "
        "mean, last quarter |",
        "|---|---|---|---|",
    ]
    cases = [(label, mode, beta, lam, fixed(0.1), 0, None) for label, mode, beta, lam in CASES]
    cases += [(f"beta 0.95 -> 0.5; lam 0 -> 0.6; {label}", "pg", FADE, RAMP, lr, games, None)
              for label, lr, games in NOISY]  # fmt: skip
    cases += [(f"beta 0.95 -> 0.5; lam 0 -> 0.6; {label}; {name}", "pg", FADE, RAMP, lr, games, tie)
              for name, tie in SEAT_TIES for label, lr, games in NOISY if lr is PRESET_LR]  # fmt: skip
    for label, mode, beta, lam, lr, games, tie in cases:
        runs = [run(mode, beta, 0.07, lr, lam=lam, seed=s, games=games, seat_tie=tie)
                for s in (0, 1, 2)]  # fmt: skip
        escapes = ", ".join(str(r["first_below_0.2"] or "-") for r in runs)
        final = np.mean([r["final_exploitability"] for r in runs])
        last = np.mean([r["mean_last_quarter"] for r in runs])
        lines.append(f"| {label} | {escapes} | {final:.3f} | {last:.3f} |")
        print(lines[-1], flush=True)
    (out / "schedules.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
