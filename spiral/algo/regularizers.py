"""Regularised policy improvement: an entropy bonus and a KL term towards a magnet policy.

Plain policy-gradient self-play has nothing that keeps the policy stochastic. In a game
with hidden information the equilibrium is mixed (Kuhn poker: bluff with J some of the
time), yet the gradient drives each probability to 0 or 1 and, once there, p(1 - p)
erases the signal that would bring it back. Measured: the embedded model settled on
"always call, bet 57-72% with any card" (exploitability exactly 1/3) and stayed.

The fix from the game-theory literature is to regularise towards a *magnet* policy:

    maximise  E[return] + entropy_coef * H(pi(.|s)) - kl_coef * KL(pi(.|s) || magnet(.|s))

at every visited decision s. Magnetic mirror descent (Sokota et al., 2023) shows that
this regularised objective has a unique fixed point, a quantal-response-like equilibrium
(each decision plays pi(a|s) proportional to magnet(a|s) * exp(Q(s, a) / tau)), that it
is close to a Nash equilibrium for small coefficients, and that the LAST iterate converges
to it instead of cycling around the equilibrium as unregularised self-play does. The
entropy bonus is the uniform magnet (KL(pi || uniform) = log n - H(pi)).
`spiral.analysis.qre` computes that fixed point for Kuhn poker and its exploitability
for given coefficients, so a run can be compared with where it should converge.

The KL is the reverse one, KL(pi || magnet), magnetic mirror descent's. (The forward
KL(magnet || pi), whose pull does not fade where the policy is saturated, was measured and
kept the embedded model's Kuhn policy on the card-blind plateau: docs/log.md.)

Computed exactly, per trained token, from the full next-token distribution the learner
already has there:
- **Constrained answers**: the distribution is the one the sampler drew from, masked to
  the legal next tokens (renormalised, tempered). When the legal moves diverge at one
  token (Kuhn poker, TicTacToe and Connect Four with common tokenizers) that IS the
  distribution over legal moves, so the entropy and KL are those of the move
  distribution, with their exact gradients. When moves diverge at several tokens, the
  terms are summed along the sampled answer; by the chain rule their expectation is the
  entropy / KL of the move distribution, and the gradient is the per-token one. The
  uniform magnet there weighs each next token by how many legal moves continue through
  it, so it is uniform over moves, not over tokens.
- **Free text**: the full-vocabulary entropy and KL(pi || reference) at each trained token
  (exact per token; no k1/k3 estimator needed, the learner holds both distributions).
- Positions are weighted like the loss (mask x row weight) and normalised with it, so the
  regulariser is an average over the decisions actually visited.

A **move floor** (`move_floor` = p_min, `move_floor_coef`) adds, at every constrained
position, coef x log(p_min / p(t)) for each legal next token t played with probability
under p_min. Where the legal moves part at one token (Kuhn, Leduc, TicTacToe and Connect
Four with common tokenizers) that is each move's probability; where they part over
several (Liar's Dice, Negotiation), it floors the tokens along the sampled answer, not
each move (a token that 50 offers share counts once). Where n tokens are legal, a floor
above 1/n cannot be met and pulls towards uniform. The entropy bonus's pull on a move's
logit is p(a) x (log-odds), which vanishes as p(a) -> 0; the floor's is coef x (1 - p(a)),
which does not, so a mixed move that the updates of other states drag towards 0 is held
near p_min. Where a move is clearly worse the policy gradient outweighs it and the move
goes below the floor at a cost of about coef / (its loss in chips). Free-text positions
(no token ruled out) have no moves to floor. Why Kuhn needs it, measured in a twin:
`docs/results/kuhn-centering/kuhn_twin_floor.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from spiral.algo.names import KL_REFERENCES, KlReference


@dataclass(frozen=True)
class Regularizer:
    """Coefficients of the entropy bonus and the KL term, and the KL's magnet:
    "reference" (the model before training: the base model under a LoRA adapter) or
    "uniform" (uniform over the legal moves, or over the vocabulary for free text) or
    "snapshot" (a frozen copy of the policy that the learner refreshes on request)."""

    entropy_coef: float = 0.0
    kl_coef: float = 0.0
    kl_reference: KlReference = "reference"
    move_floor: float = 0.0
    move_floor_coef: float = 0.0

    def __post_init__(self) -> None:
        coefs = (self.entropy_coef, self.kl_coef, self.move_floor_coef)
        if not all(c >= 0 and math.isfinite(c) for c in coefs):
            raise ValueError(
                f"entropy_coef, kl_coef and move_floor_coef must be finite and >= 0, got "
                f"{self.entropy_coef}, {self.kl_coef}, {self.move_floor_coef}"
            )
        if not 0.0 <= self.move_floor < 1.0:
            raise ValueError(f"move_floor must be in [0, 1) (e.g. 0.1), got {self.move_floor}")
        if self.kl_reference not in KL_REFERENCES:
            raise ValueError(
                f"kl_reference={self.kl_reference!r} is unknown; choose one of "
                f"{', '.join(KL_REFERENCES)}"
            )

    @property
    def floored(self) -> bool:
        return self.move_floor > 0 and self.move_floor_coef > 0

    @property
    def active(self) -> bool:
        return self.entropy_coef > 0 or self.kl_coef > 0 or self.floored

    @property
    def needs_reference_model(self) -> bool:
        """The magnet is a model's distribution (the reference or the snapshot)."""
        return self.kl_coef > 0 and self.kl_reference in ("reference", "snapshot")


def entropy_and_kl(logp_NV: Tensor, magnet_logp_NV: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """Per row: H(p) and KL(p || magnet), with p = exp(logp_NV) over its support.

    Entries of -inf have probability 0 and contribute nothing (also no NaN gradient).
    The magnet must give positive mass wherever p does, and no mass outside it."""
    support_NV = logp_NV > float("-inf")
    safe_NV = torch.where(support_NV, logp_NV, torch.zeros_like(logp_NV))
    p_NV = safe_NV.exp() * support_NV
    entropy_N = -(p_NV * safe_NV).sum(dim=-1)
    if magnet_logp_NV is None:
        return entropy_N, None
    magnet_NV = torch.where(support_NV, magnet_logp_NV.detach(), torch.zeros_like(logp_NV))
    if bool((magnet_NV[support_NV] == float("-inf")).any()):
        raise ValueError("the magnet gives probability 0 to a token the policy can choose")
    kl_N = (p_NV * (safe_NV - magnet_NV)).sum(dim=-1)
    return entropy_N, kl_N


def move_floor_deficit(logp_NV: Tensor, p_min: float) -> Tensor:
    """Per row: the sum of log(p_min / p(t)) over the legal tokens t with p(t) < p_min, 0
    for a row with no entry ruled out (-inf): free text has no moves to floor."""
    support_NV = logp_NV > float("-inf")
    safe_NV = torch.where(support_NV, logp_NV, torch.zeros_like(logp_NV))
    gap_NV = (math.log(p_min) - safe_NV).clamp(min=0.0) * support_NV
    constrained_N = ~support_NV.all(dim=-1)
    return gap_NV.sum(dim=-1) * constrained_N


def regularizer_loss(
    logp_NV: Tensor,
    magnet_logp_NV: Tensor | None,
    weight_N: Tensor,
    reg: Regularizer,
) -> tuple[Tensor, dict[str, float]]:
    """sum_n weight_n * (kl_coef * KL(p_n || magnet_n) - entropy_coef * H(p_n)).

    A SUM over positions like the policy losses (the learner normalises). Diagnostics are
    weighted means: `entropy`, and `kl_to_magnet` when a magnet is given."""
    if reg.kl_coef > 0 and magnet_logp_NV is None:
        raise ValueError("kl_coef > 0 needs the magnet's log-probs")
    entropy_N, kl_N = entropy_and_kl(logp_NV, magnet_logp_NV)
    floor_N = move_floor_deficit(logp_NV, reg.move_floor) if reg.floored else None
    return regularizer_from_terms(entropy_N, kl_N, weight_N, reg, floor_N)


def regularizer_from_terms(
    entropy_N: Tensor,
    kl_N: Tensor | None,
    weight_N: Tensor,
    reg: Regularizer,
    floor_N: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """`regularizer_loss` from each position's entropy and KL (`entropy_and_kl`) and move
    floor deficit (`move_floor_deficit`), for a caller that computed them a chunk of
    positions at a time."""
    if reg.kl_coef > 0 and kl_N is None:
        raise ValueError("kl_coef > 0 needs the KL to the magnet")
    if reg.floored and floor_N is None:
        raise ValueError("a move floor needs each position's deficit (move_floor_deficit)")
    w_N = weight_N.detach().to(entropy_N.dtype)
    loss = -reg.entropy_coef * (w_N * entropy_N).sum()
    if kl_N is not None and reg.kl_coef > 0:
        loss = loss + reg.kl_coef * (w_N * kl_N).sum()
    total = float(w_N.sum())
    diagnostics = {"entropy": float((w_N * entropy_N.detach()).sum()) / total if total else 0.0}
    if kl_N is not None:
        kl = float((w_N * kl_N.detach()).sum())
        diagnostics["kl_to_magnet"] = kl / total if total else 0.0
    if floor_N is not None and reg.floored:
        loss = loss + reg.move_floor_coef * (w_N * floor_N).sum()
        deficit = float((w_N * floor_N.detach()).sum())
        diagnostics["move_floor_deficit"] = deficit / total if total else 0.0
    return loss, diagnostics


def uniform_magnet(
    vocab_size: int, shares: list[dict[int, int] | None], device: torch.device | None = None
) -> Tensor:
    """Log-probs of the uniform magnet per position: over legal moves where `shares` gives
    {next token: number of legal moves through it}, over the vocabulary where it is None."""
    out_NV = torch.full((len(shares), vocab_size), -float(torch.log(torch.tensor(vocab_size))))
    for n, share in enumerate(shares):
        if share is None:
            continue
        out_NV[n] = float("-inf")
        total = sum(share.values())
        for token, count in share.items():
            out_NV[n, token] = float(torch.log(torch.tensor(count / total)))
    return out_NV.to(device) if device is not None else out_NV
