"""Turn finished games into training rows (Datums) in the shifted Tinker layout.

One Datum per trainable turn of a seat that has an advantage. With P = prompt_ids and
C = completion.tokens, the full sequence is P + C and

    input_ids        = (P + C)[:-1]
    target_ids       = (P + C)[1:]
    sampler_logprobs = [0] * (len(P) - 1) + completion.logprobs
    advantages       = [0] * (len(P) - 1) + [A_turn] * len(C)
    mask             = [0] * (len(P) - 1) + [1] * len(C)     (forced tokens: 0, see below)

so completion token j sits at target index len(P) - 1 + j. Choices made here:

- Token ids are used exactly as sampled; nothing is re-tokenised.
- A_turn comes from `turn_advantages` over the seat's trainable turns in that episode
  (gamma = 1 gives every turn the seat's advantage). The advantage mapping is only read,
  never written into; rewards stay rewards.
- **Forced marker tokens are not trained.** Under an AnswerConstraint with a non-empty
  marker, the len(marker) tokens just before `answer_start` were forced by the sampler
  (log-prob 0), not chosen, so they get mask 0. The choice tokens after them were chosen
  among the constrained options and keep mask 1; `constraint_start` (target coordinates)
  and `constraint` let the learner recompute their log-probs under the same restriction.
- **Single-option answer tokens are not trained either.** Where the legal answers leave
  only one possible next token (the " [" that opens every Kuhn move, the closing "]"),
  the token had log-prob 0 and carries no gradient; mask 0 keeps it out of every
  per-token statistic (ratio, clip fraction, KL, entropy) and token count. In Kuhn poker
  these were two of the three answer tokens.
- Trainable turns of a seat without an advantage (a frozen opponent, say) are skipped
  and counted in `assemble/num_skipped_turns`, so a missing advantage is visible.
- `filter_zero_adv` drops turns whose advantage is exactly 0 (OAT's default was on).
- `private_centering` > 0 adds to each kept turn's advantage its offset from
  `spiral.algo.private_centering` (public state: game, seat and the moves before the
  turn; private information: the turn's prompt; action: its sampled tokens).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from spiral.algo.private_centering import private_centering_offsets
from spiral.algo.rae import turn_advantages
from spiral.types import Completion, Datum, Episode, Turn


def _forced_span(turn: Turn) -> tuple[int, int] | None:
    """[start, end) of the forced marker tokens within the completion, if any."""
    completion = turn.completion
    assert completion is not None
    constraint = completion.constraint
    if constraint is None or not constraint.marker:
        return None
    start = completion.answer_start
    n_marker = len(constraint.marker)
    if start is None or start < n_marker or start > len(completion.tokens):
        raise ValueError(
            f"{turn.game_id} seat {turn.seat}: constrained completion has answer_start="
            f"{start} but a marker of {n_marker} tokens and {len(completion.tokens)} tokens; "
            "the sampler must set answer_start just after the forced marker"
        )
    if completion.tokens[start - n_marker : start] != constraint.marker:
        raise ValueError(
            f"{turn.game_id} seat {turn.seat}: the {n_marker} tokens before answer_start "
            f"{completion.tokens[start - n_marker : start]} are not the marker "
            f"{constraint.marker}; the sampler's answer_start is wrong"
        )
    return start - n_marker, start


def _single_option_positions(completion: Completion) -> list[int]:
    """Indices (within the completion) of answer tokens that had exactly one legal option."""
    constraint, start = completion.constraint, completion.answer_start
    if constraint is None or start is None:
        return []
    answer = completion.tokens[start:]
    return [start + j for j in range(len(answer)) if len(constraint.next_tokens(answer[:j])) == 1]


def turn_to_datum(turn: Turn, advantage: float) -> Datum:
    """One training row for one sampled turn (see the module docstring for the layout)."""
    completion = turn.completion
    if completion is None or not completion.tokens:
        raise ValueError(f"{turn.game_id} seat {turn.seat}: turn has no sampled tokens to train on")
    if not turn.prompt_ids:
        raise ValueError(
            f"{turn.game_id} seat {turn.seat}: turn has no prompt_ids; the rollout must "
            "record the exact prompt ids it sampled from"
        )
    if len(completion.logprobs) != len(completion.tokens):
        raise ValueError(
            f"{turn.game_id} seat {turn.seat}: {len(completion.tokens)} tokens but "
            f"{len(completion.logprobs)} log-probs; the sampler must return one per token"
        )
    n_prompt = len(turn.prompt_ids) - 1  # prompt positions in target coordinates
    n_completion = len(completion.tokens)
    full = turn.prompt_ids + completion.tokens
    mask = [0.0] * n_prompt + [1.0] * n_completion
    forced = _forced_span(turn)
    if forced is not None:
        for j in range(*forced):
            mask[n_prompt + j] = 0.0
    for j in _single_option_positions(completion):
        mask[n_prompt + j] = 0.0
    constraint_start = None
    if completion.constraint is not None and completion.answer_start is not None:
        constraint_start = n_prompt + completion.answer_start
    return Datum(
        input_ids=full[:-1],
        target_ids=full[1:],
        sampler_logprobs=(0.0,) * n_prompt + tuple(float(x) for x in completion.logprobs),
        advantages=(0.0,) * n_prompt + (float(advantage),) * n_completion,
        mask=tuple(mask),
        constraint_start=constraint_start,
        constraint=completion.constraint,
        game_id=turn.game_id,
        seat=turn.seat,
        policy_version=turn.policy_version,
    )


def assemble(
    episodes: Sequence[Episode],
    advantages: Mapping[tuple[int, int], float],
    gamma: float = 1.0,
    filter_zero_adv: bool = False,
    private_centering: float = 0.0,
) -> tuple[list[Datum], dict[str, float]]:
    """Datums for every trainable turn whose (episode index, seat) has an advantage;
    with `private_centering` > 0 their advantages are centred over the seats' private
    information (`spiral.algo.private_centering`)."""
    picked: list[tuple[Turn, float, tuple[object, ...]]] = []  # turn, advantage, public state
    n_filtered = n_skipped = 0
    for index, episode in enumerate(episodes):
        # Per-turn advantages by seat, then walk the turns in play order.
        per_seat: dict[int, list[float]] = {}
        for seat in (0, 1):
            n_turns = sum(1 for t in episode.seat_turns(seat) if t.trainable)
            if n_turns and (index, seat) in advantages:
                per_seat[seat] = turn_advantages(advantages[(index, seat)], n_turns, gamma)
            else:
                n_skipped += n_turns
        for position, turn in enumerate(episode.turns):
            if not turn.trainable or turn.seat not in per_seat:
                continue
            adv = per_seat[turn.seat].pop(0)
            if filter_zero_adv and adv == 0.0:
                n_filtered += 1
                continue
            public = (turn.game_id, turn.seat, tuple(episode.moves[:position]))
            picked.append((turn, adv, public))
    offsets = private_centering_offsets(
        [public for _, _, public in picked],
        [turn.prompt_ids for turn, _, _ in picked],
        [turn.completion.tokens if turn.completion else () for turn, _, _ in picked],
        [adv for _, adv, _ in picked],
        private_centering,
    )
    turn_advs = [adv + offset for (_, adv, _), offset in zip(picked, offsets, strict=True)]
    datums = [turn_to_datum(turn, adv) for (turn, _, _), adv in zip(picked, turn_advs, strict=True)]
    n_tokens = sum(
        len(d.target_ids) - (len(t.prompt_ids) - 1)
        for (t, _, _), d in zip(picked, datums, strict=True)
    )
    n_trained_tokens = sum(int(sum(d.mask)) for d in datums)
    metrics = _metrics(turn_advs, n_tokens, n_trained_tokens, n_filtered, n_skipped)
    if private_centering > 0:
        metrics["centering_mean_abs_offset"] = (
            sum(abs(o) for o in offsets) / len(offsets) if offsets else 0.0
        )
    return datums, metrics


def _metrics(
    advs: list[float], n_tokens: int, n_trained: int, n_filtered: int, n_skipped: int
) -> dict[str, float]:
    mean = sum(advs) / len(advs) if advs else 0.0
    std = math.sqrt(sum((a - mean) ** 2 for a in advs) / len(advs)) if advs else 0.0
    return {
        "assemble/num_datums": float(len(advs)),
        "assemble/num_tokens": float(n_tokens),
        "assemble/num_trained_tokens": float(n_trained),
        "assemble/num_filtered_turns": float(n_filtered),
        "assemble/num_skipped_turns": float(n_skipped),
        "assemble/mean_advantage": mean,
        "assemble/std_advantage": std,
        "assemble/min_advantage": min(advs) if advs else 0.0,
        "assemble/max_advantage": max(advs) if advs else 0.0,
    }
