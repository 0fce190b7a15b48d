"""Private-information centering: a preconditioner for games with hidden cards.

One model plays every information state, and in a language model the states that differ
only in a seat's private information (Kuhn's J, Q and K at one betting history) are
nearly the same input: their gradients point the same way (cosine 0.993-0.997 measured on
the embedded model). An update then moves every card's policy together, and the part that
differs between cards, the part that leaves the card-blind plateau, is a small residual
of it. Natural gradient would undo that; this does the cheap part of it for the policy
gradient.

Rows are grouped by *public state* (game, seat, the moves so far) and, within it, by
*private information* c (rows with one prompt at one public state) and action a (the
sampled completion). For each c, with n_c(a) rows of action a whose advantages sum to
S_c(a), and n_c, S_c the totals, the policy gradient's coefficient on the action logits
of state c is

    G_c(a) = S_c(a) - n_c(a) / n_c * S_c           (sum over a is 0)

(a softmax's score is e_a - pi; n_c(a) / n_c estimates pi). Centering subtracts `beta`
times the mean over the public state's private informations:

    G'_c(a) = G_c(a) - beta * mean_c' G_c'(a)

which scales the component shared by the private informations by (1 - beta) and keeps
what differs between them. It is realised by adding -beta * mean_c' G_c'(a) / n_c(a) to
the advantage of each row of (c, a): because those additions sum to 0 over a, the
gradient changes by exactly that amount whatever the policy's true probabilities are.

Not a baseline: it changes the expected update (the policy gradient part only; the
regulariser is left alone), so its fixed point moves with `beta`. On the shared-parameter
twin (`docs/results/kuhn-centering/kuhn_shared_twin.py`, cosine 0.995, lr 0.1) beta 0.5-0.95 left the
card-blind plateau 2-4x sooner and ended at 0.08-0.10 instead of 0.20; on the embedded
model (beta 0.8, five seeds) it left the plateau sooner and ended where the preset does
(`docs/results.md`, "Private-information centering"). Public states with one private
information (every state of a perfect-information game) are left alone.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence


def private_centering_offsets(
    publics: Sequence[Hashable],
    privates: Sequence[Hashable],
    actions: Sequence[Hashable],
    advantages: Sequence[float],
    beta: float,
    weights: Sequence[float] | None = None,
) -> list[float]:
    """Per row, the amount to add to its advantage (see the module docstring). `weights`:
    the rows each row stands for (1 each when None; full width's rows carry reach x
    pi(a), so n_c(a) and S_c(a) are weighted sums)."""
    n = len(advantages)
    w = [1.0] * n if weights is None else [float(x) for x in weights]
    if not len(publics) == len(privates) == len(actions) == len(w) == n:
        raise ValueError(
            f"{len(publics)} public keys, {len(privates)} private keys, {len(actions)} "
            f"actions, {len(w)} weights and {n} advantages: one of each per row"
        )
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"private_centering must be in [0, 1), got {beta}")
    offsets = [0.0] * n
    if beta == 0.0:
        return offsets
    by_public: dict[Hashable, list[int]] = defaultdict(list)
    for i, key in enumerate(publics):
        by_public[key].append(i)
    for rows in by_public.values():
        if len({privates[i] for i in rows}) < 2:
            continue
        count: dict[tuple[Hashable, Hashable], float] = defaultdict(float)
        total: dict[tuple[Hashable, Hashable], float] = defaultdict(float)
        n_info: dict[Hashable, float] = defaultdict(float)
        s_info: dict[Hashable, float] = defaultdict(float)
        for i in rows:
            count[privates[i], actions[i]] += w[i]
            total[privates[i], actions[i]] += w[i] * advantages[i]
            n_info[privates[i]] += w[i]
            s_info[privates[i]] += w[i] * advantages[i]
        mean_g: dict[Hashable, float] = defaultdict(float)
        for (c, a), k in count.items():
            mean_g[a] += (total[c, a] - k / n_info[c] * s_info[c]) / len(n_info)
        for i in rows:
            offsets[i] = -beta * mean_g[actions[i]] / count[privates[i], actions[i]]
    return offsets
