"""`rollout=full_width`: a step's rows from the whole game tree instead of sampled games.

For a game that lists its chance outcomes, with answers constrained to the legal moves,
every deal and every move is expanded once per run (`algo/full_width.py`: the tree, each
decision keyed by the prompt its seat reads); each step then

    scores every distinct prompt's legal answers     one batched `score` call
    computes reach and move values exactly           `exact_values`, both seats the policy
    builds one row per (prompt, move)                weight reach x pi(a), advantage Q - V

and the learner takes the update on those rows, the exact expectation of the sampled
update (the regularisers included), with no sampling noise. Nothing is played: a step
has no episodes, no RAE baselines (Q - V is the exact baseline) and no transcripts.

Refused in one line before any model work: answers that are not constrained or that
think first (free text cannot be expanded), population play and the async actors (both
play sampled games against other weights), by the config (`TrainConfig.validate`); a game
that cannot list its chance outcomes or whose tree holds more than `MAX_DECISIONS`
decisions, by `check_full_width` when the run is set up.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
import warnings
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from spiral import games
from spiral.agents.llm_policy import LLMPolicy
from spiral.algo.assemble import turn_to_datum
from spiral.algo.full_width import GameTree, TreeTooLarge, count_decisions, exact_values, expand
from spiral.algo.private_centering import private_centering_offsets
from spiral.analysis.exploitability import KUHN_CARDS, KUHN_GAME_ID
from spiral.analysis.leduc import LEDUC_GAME_ID
from spiral.analysis.move_distribution import trie_token_logprobs
from spiral.engines.base import Learner, Sampler
from spiral.errors import UsageError
from spiral.evaluation.model_policy import (
    answer_request,
    model_kuhn_exploitability,
    model_leduc_exploitability,
)
from spiral.games.base import State
from spiral.train.config import TrainConfig
from spiral.types import (
    AnswerConstraint,
    Completion,
    Datum,
    Move,
    ParseResult,
    Seat,
    Turn,
)

MAX_DECISIONS = 20_000  # Leduc: 4,320 decisions over 120 deals, 288 prompts
NEGLIGIBLE = 1e-12  # a row's share of the step's weight below which it is left out
POLICY = "policy"
# Games whose policy table has an exact exploitability, and the numbers kept of it.
EXACT_TABLES: dict[str, Callable[[LLMPolicy, float], dict[str, Any]]] = {
    KUHN_GAME_ID: model_kuhn_exploitability,
    LEDUC_GAME_ID: model_leduc_exploitability,
}
EXACT_KEYS = frozenset(
    {
        "exploitability",
        "nash_conv",
        "value_vs_nash_seat0",
        "value_vs_nash_seat1",
        *(f"br_gain_seat{s}_round{r}" for s in (0, 1) for r in (1, 2)),
    }
)


def listed_deals(game_id: str, params: Mapping[str, Any] | None = None) -> list[State] | None:
    """A fresh state for each of the game's listed chance outcomes (one for a game
    without chance), or None where it cannot list them."""
    outcomes = games.chance_outcomes(game_id)
    if outcomes is None:
        return None
    base = dict(params or {})
    return [games.make(game_id, seed=0, **base, **o) for o in outcomes or ({},)]


def check_full_width(cfg: TrainConfig, game_params: Mapping[str, Mapping[str, Any]]) -> None:
    """Each game can be expanded: its chance outcomes listed, its tree within the bound
    (the keys full width needs are checked with the config, `TrainConfig.validate`)."""
    for game_id in cfg.env_ids:
        deals = listed_deals(game_id, game_params.get(game_id))
        if deals is None:
            raise UsageError(
                f"rollout=full_width: {game_id} cannot list its chance outcomes, so its tree "
                "cannot be expanded (KuhnPokerSingle-v0 and LeducPoker-v0 can); use "
                "rollout=sampled"
            )
        try:
            count_decisions(deals, MAX_DECISIONS)
        except TreeTooLarge as err:
            raise UsageError(f"rollout=full_width: {err}; use rollout=sampled") from None


@dataclass(frozen=True)
class Situation:
    """One prompt of the tree: what its seat reads and may answer."""

    game_id: str
    seat: Seat
    prompt_ids: tuple[int, ...]
    moves: tuple[Move, ...]
    answers: tuple[tuple[int, ...], ...]  # each move's answer tokens, as the sampler draws
    constraint: AnswerConstraint
    public: tuple[Move, ...]  # the moves before it (for private-information centering)


@dataclass(frozen=True)
class GameRows:
    """A game's tree and its prompts, made once per run."""

    tree: GameTree
    situations: dict[Hashable, Situation]


class FullWidth:
    """The exact rows of a run's games under the learner's current weights."""

    def __init__(
        self, cfg: TrainConfig, policy: LLMPolicy, game_params: Mapping[str, Mapping[str, Any]]
    ) -> None:
        """`policy`: the run's agent (its prompts per game and tokenizer); the weights
        each step scores are the learner's then (`rows`)."""
        self.policy = policy
        self.cfg = cfg
        self.unmeasured: set[str] = set()  # games whose exact numbers cannot be read here
        self.games = {
            game_id: self._expand(game_id, game_params.get(game_id))
            for game_id in dict.fromkeys(cfg.env_ids)
        }

    def _expand(self, game_id: str, params: Mapping[str, Any] | None) -> GameRows:
        deals = listed_deals(game_id, params)
        assert deals is not None  # check_full_width refused it otherwise
        situations: dict[Hashable, Situation] = {}

        def key(state: State, seat: Seat) -> Hashable:
            prompt_ids, pairs, _ = answer_request(self.policy, state, seat)
            k = tuple(prompt_ids)
            if k not in situations:
                constraint = self.policy_constraint(state, seat)
                situations[k] = Situation(
                    game_id,
                    seat,
                    k,
                    tuple(m for m, _ in pairs),
                    tuple(tuple(ids) for _, ids in pairs),
                    constraint,
                    (),
                )
            return k

        try:
            tree = expand(deals, key, MAX_DECISIONS)
        except ValueError as err:  # a prompt that does not tell two move sets apart
            raise UsageError(f"rollout=full_width: {err}; use rollout=sampled") from None
        first: dict[Hashable, int] = {}
        for i, k in enumerate(tree.keys):
            first.setdefault(k, i)
        situations = {
            k: dataclasses.replace(s, public=tree.publics[first[k]]) for k, s in situations.items()
        }
        return GameRows(tree, situations)

    def policy_constraint(self, state: State, seat: Seat) -> AnswerConstraint:
        from spiral.prompts.render import constraint_for

        constraint = constraint_for(
            state, self.policy.spec_for(state), self.policy.sampler.tokenizer
        )
        assert constraint is not None  # answer_format=constrained (check_full_width)
        return constraint

    @property
    def num_situations(self) -> int:
        return sum(len(g.situations) for g in self.games.values())

    def rows(
        self, learner: Learner, centering: float = 0.0
    ) -> tuple[list[Datum], dict[str, float]]:
        """The step's rows under the learner's weights now, and what they measured."""
        t0 = time.perf_counter()
        sampler = learner.sampler()
        situations = [s for g in self.games.values() for s in g.situations.values()]
        situations.sort(key=lambda s: s.prompt_ids)  # neighbours share their prefix
        prompts = [list(s.prompt_ids) for s in situations for _ in s.answers]
        answers = [list(a) for s in situations for a in s.answers]
        scored = sampler.score(prompts, answers, temperature=self.cfg.temperature)
        t1 = time.perf_counter()
        token_lps: dict[Hashable, list[list[float]]] = {}
        probs: dict[Hashable, list[float]] = {}
        start = 0
        for s in situations:
            rows = scored[start : start + len(s.answers)]
            start += len(s.answers)
            token_lps[s.prompt_ids] = trie_token_logprobs(s.answers, rows)
            probs[s.prompt_ids] = _normalised(
                [math.exp(math.fsum(r)) for r in token_lps[s.prompt_ids]]
            )
        picked: list[tuple[Situation, int, float, float]] = []  # situation, move, weight, adv
        metrics: dict[str, float] = {}
        n_ids = len(self.cfg.env_ids)
        for game_id, game in self.games.items():
            share = self.cfg.env_ids.count(game_id) / n_ids  # as a sampled step's games
            values, root = exact_values(game.tree, probs)
            for k, v in values.items():
                s, p = game.situations[k], probs[k]
                baseline = v.value(p)
                for a, q in enumerate(v.q):
                    weight = share * v.reach * p[a]
                    if weight > 0:
                        picked.append((s, a, weight, q - baseline))
            metrics[f"full_width/{game_id}/value_seat0"] = root[0]
            metrics[f"full_width/{game_id}/value_seat1"] = root[1]
            metrics[f"full_width/{game_id}/decisions_per_game"] = math.fsum(
                v.reach for v in values.values()
            )
        # Rows of moves the policy all but never makes carry no gradient worth a row, and
        # their centering offsets (divided by the weight) would overflow.
        total = math.fsum(w for _, _, w, _ in picked)
        picked = [row for row in picked if row[2] > NEGLIGIBLE * total]
        offsets = private_centering_offsets(
            [(s.game_id, s.seat, s.public) for s, _, _, _ in picked],
            [s.prompt_ids for s, _, _, _ in picked],
            [s.answers[a] for s, a, _, _ in picked],
            [adv for _, _, _, adv in picked],
            centering,
            weights=[w for _, _, w, _ in picked],
        )
        metrics.update(self._exact_metrics(prompts, answers, scored))
        version = int(getattr(sampler, "version", -1))
        datums = [
            _datum(s, a, token_lps[s.prompt_ids][a], w, adv + off, version)
            for (s, a, w, adv), off in zip(picked, offsets, strict=True)
        ]
        advs = [adv + off for (_, _, _, adv), off in zip(picked, offsets, strict=True)]
        weights = [w for _, _, w, _ in picked]
        total = math.fsum(weights)
        metrics.update(
            {
                "full_width/situations": float(len(situations)),
                "full_width/rows": float(len(datums)),
                "full_width/mean_abs_advantage": math.fsum(
                    w * abs(x) for w, x in zip(weights, advs, strict=True)
                )
                / total
                if total
                else 0.0,
                "time/score": t1 - t0,
                "time/prepare_datums": time.perf_counter() - t1,
            }
        )
        return datums, metrics

    def _exact_metrics(
        self, prompts: list[list[int]], answers: list[list[int]], scored: list[list[float]]
    ) -> dict[str, float]:
        """Exact exploitability of the step's policy where the game has it (Kuhn, Leduc),
        from the rows just scored (no model work): `full_width/<game>/exploitability`,
        each step, at the sampling temperature; Kuhn's table as `.../p_bet/<state>`,
        Leduc's best responder's gain per seat and round."""
        measured = [g for g in self.games if g in EXACT_TABLES]
        if not measured or not self.cfg.evaluation.eval_exploitability:
            return {}
        table = copy.copy(self.policy)
        rows = {(tuple(p), tuple(a)): r for p, a, r in zip(prompts, answers, scored, strict=True)}
        scored_rows = ScoredRows(self.policy.sampler.tokenizer, rows, self.cfg.temperature)
        table.sampler = cast(Sampler, scored_rows)  # the measures only score
        metrics: dict[str, float] = {}
        for game_id in measured:
            try:
                report = EXACT_TABLES[game_id](table, self.cfg.temperature)
            except ImportError:  # no OpenSpiel: the numbers are the evaluation's to skip
                continue
            except KeyError:  # the measure's prompts are not the tree's (game params)
                if game_id not in self.unmeasured:
                    self.unmeasured.add(game_id)
                    warnings.warn(
                        f"full width: {game_id}'s exact exploitability needs prompts the "
                        "tree does not hold (the evaluation still measures it)",
                        stacklevel=2,
                    )
                continue
            prefix = f"full_width/{game_id}"
            for key, value in report.items():
                if isinstance(value, (int, float)) and key in EXACT_KEYS:
                    metrics[f"{prefix}/{key}"] = float(value)
            if game_id == KUHN_GAME_ID:
                for info, dist in report["distributions"].items():
                    name = KUHN_CARDS[int(info[0])] + info[1:]
                    aggressive = dist.get("[bet]", 0.0) + dist.get("[call]", 0.0)
                    metrics[f"{prefix}/p_bet/{name}"] = float(aggressive)
        return metrics


class ScoredRows:
    """Answers `score` from rows a step has already scored, for the measures that take a
    sampler (`evaluation.model_policy`); a row it does not hold is a bug, and says so."""

    def __init__(
        self,
        tokenizer: Any,
        rows: dict[tuple[tuple[int, ...], tuple[int, ...]], list[float]],
        temperature: float,
    ) -> None:
        self.tokenizer = tokenizer
        self.rows = rows
        self.temperature = temperature

    def score(
        self,
        prompts: Sequence[Sequence[int]],
        continuations: Sequence[Sequence[int]],
        temperature: float = 1.0,
    ) -> list[list[float]]:
        if temperature != self.temperature:
            raise ValueError(
                f"rows were scored at temperature {self.temperature}, asked at {temperature}"
            )
        out = []
        for prompt, answer in zip(prompts, continuations, strict=True):
            found = self.rows.get((tuple(prompt), tuple(answer)))
            if found is None:
                raise KeyError("a prompt the full-width tree does not hold was asked for")
            out.append(list(found))
        return out


def _normalised(values: Sequence[float]) -> list[float]:
    total = math.fsum(values)
    return [v / total for v in values]


def _datum(
    s: Situation, move: int, logprobs: list[float], weight: float, advantage: float, version: int
) -> Datum:
    """The row a sampled turn of `s` answering `move` would give (`turn_to_datum`), with
    the weight of the turns it stands for."""
    tokens = s.answers[move]
    completion = Completion(
        tokens=tokens,
        logprobs=tuple(logprobs),
        stop_reason="stop",
        text=s.moves[move],
        answer_start=0,
        constraint=s.constraint,
    )
    turn = Turn(
        game_id=s.game_id,
        seat=s.seat,
        agent=POLICY,
        observation="",
        prompt_ids=s.prompt_ids,
        completion=completion,
        parse=ParseResult(move=s.moves[move]),
        policy_version=version,
    )
    return dataclasses.replace(turn_to_datum(turn, advantage), weight=weight)
