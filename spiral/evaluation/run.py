"""`spiral eval`: a checkpoint (or the base model) against opponents, both seats, with intervals.

    spiral eval checkpoint=runs/x/checkpoints/step_000024 env_ids=TicTacToe-v0,KuhnPoker-v1 \
        opponents=random,optimal games=64 seed=0 exploitability=true math=sample:gsm8k

For each game, opponent and seat of the candidate, `games` seeded games are played with
`spiral.evaluation.match.evaluate`; the table shows win / draw / loss / invalid rates with
95% Wilson intervals and n, then mean game length and response length. A JSON report
(counts, rates, intervals, seeds, API call and retry counts, settings) goes into the
checkpoint's run (`RUN/eval/<checkpoint>_<games>_vs_<opponents>_seed<S>.json`, see
outputs.py) or to `out=`. Keys left unset come from the run's config (inherit.py).
`run=DIR` evaluates several checkpoints of a run and writes one comparison table
(compare.py).

Choices:
- The candidate is built by `make_checkpoint_agent`, so prompts and sampling come from the
  checkpoint's own config unless `template=`, `answer_format=`, `temperature=`,
  `max_tokens=` override them. Opponents are agent specs (`random`, `optimal`,
  `checkpoint:PATH`, `api:MODEL`); model-backed ones are built once and reused across
  games, scripted ones per game (`optimal` depends on the game).
- Everything is validated (games, opponent specs, paths, math names) BEFORE any model is
  loaded, so a typo fails in a second with the valid choices.
- Progress (`evaluate_candidate`): a line as each game's matches start and end (with the
  time they took), before each exact exploitability and as its positions are scored (32
  a call, `model_policy.SLICE`), and before the math benchmarks.
- An API opponent's reply is a move (an invalid one loses it the game); no reply after its
  retries stops the evaluation in one line (`ApiCallError`), never a game scored as the
  API side's loss. Its calls, retries and token use go into the report.
- Exploitability (KuhnPokerSingle-v0, exact): the model's move distribution at each of the
  12 information states, from ONE score call per state over the legal answers' tokens
  (`move_distribution`): the trie normalisation for the constrained format (what its
  sampler does), the sequence one for bracket / boxed (the answer written directly,
  `[bet]` or `\\boxed{[bet]}`). With a think budget the marker is appended to the prompt:
  the distribution is the one of answering without thinking. Needs OpenSpiel.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from spiral import agents
from spiral.agents.api_agent import ApiAgent
from spiral.agents.base import Agent
from spiral.agents.llm_policy import LLMPolicy
from spiral.agents.mixture import MixturePolicy
from spiral.agents.model_agent import (
    CheckpointPolicy,
)
from spiral.evaluation.eval_args import MODEL_PREFIXES, EvalArgs
from spiral.evaluation.match import MatchResult, evaluate, results_metrics, results_table
from spiral.evaluation.mixture import MIXTURE_GAMES, mixture_exploitability
from spiral.evaluation.model_policy import EXACT_EXPLOITABILITY
from spiral.evaluation.outputs import candidate_part, fresh, run_folder, settings_tag
from spiral.prompts.invalid import InvalidMovePolicy, invalid_policy
from spiral.report.writable import UnwritablePath
from spiral.rollout.play import derive_seed

Progress = Callable[[str], None]  # one line of progress (the CLI prints it)
RATE_FIELDS = (("win", "wins"), ("draw", "draws"), ("loss", "losses"), ("invalid", "invalid"))


def build_opponents(
    a: EvalArgs, game_index: int, game_id: str, cache: dict[str, Agent]
) -> dict[str, Agent]:
    """Opponent label -> agent for one game; model-backed opponents come from `cache`."""
    out: dict[str, Agent] = {}
    for o, spec in enumerate(a.opponents):
        seed = derive_seed(a.seed, 101, game_index, o)
        prefix = spec.partition(":")[0]
        if prefix not in MODEL_PREFIXES:
            out[spec] = agents.make(spec, game_id=game_id, seed=seed)
            continue
        if spec not in cache:
            params: dict[str, Any] = {"device": a.device, "engine": a.engine}
            if prefix == "api":
                params = {
                    "base_url": a.api_base_url,
                    "api_key_env": a.api_key_env,
                    "max_tokens": a.api_max_tokens,
                    "max_retries": a.api_max_retries,
                }
            cache[spec] = agents.make(spec, seed=seed, **params)
        out[spec] = cache[spec]
    return out


def _api_delta(before: dict[str, Any] | None, agent: ApiAgent) -> dict[str, Any]:
    """This candidate's share of a (cached, reused) API agent's counters."""
    now = agent.stats()
    if before is None:
        return now
    return {k: v - before[k] if isinstance(v, int) else v for k, v in now.items()}


def result_row(r: MatchResult) -> dict[str, Any]:
    row: dict[str, Any] = asdict(r)
    row["seeds"] = list(r.seeds)
    for bound in ("mean_return", "return_low", "return_high"):  # JSON has no inf or nan
        row[bound] = row[bound] if math.isfinite(row[bound]) else None
    for label, attr in RATE_FIELDS:
        value, low, high = r.rate(getattr(r, attr))
        row[f"{label}_rate"] = {"value": value, "low": low, "high": high}
    return row


Candidate = LLMPolicy | MixturePolicy  # a checkpoint, or a run's iterates mixed (weights=)


def _source(candidate: Candidate) -> Any:
    """Where the candidate's weights and run config come from (a mixture: its newest)."""
    return candidate.source if isinstance(candidate, (CheckpointPolicy, MixturePolicy)) else None


def _play(
    candidate: Candidate,
    a: EvalArgs,
    cache: dict[str, Agent],
    policy: InvalidMovePolicy,
    progress: Progress,
) -> tuple[list[MatchResult], list[dict[str, Any]]]:
    """Every (game, opponent, seat) matchup: MatchResults and their JSON rows."""
    source = _source(candidate)
    config = source.config if source else {}
    max_turns = a.max_turns if a.max_turns is not None else int(config.get("max_turns", 0) or 0)
    games = a.games_per_seat
    results: list[MatchResult] = []
    rows: list[dict[str, Any]] = []
    for g, game_id in enumerate(a.env_ids):
        opponents = build_opponents(a, g, game_id, cache)
        t0 = time.perf_counter()
        progress(
            f"{candidate.name}: {game_id}, {2 * games * len(opponents)} games "
            f"({games} per seat vs {', '.join(opponents)}) ..."
        )
        game_results, _ = evaluate(
            candidate,
            opponents,
            [game_id],
            games,
            policy,
            seed=derive_seed(a.seed, g),
            game_params={"max_turns": max_turns} if max_turns else None,
        )
        progress(f"{candidate.name}: {game_id} played in {time.perf_counter() - t0:.1f} s")
        results += game_results
        rows += [result_row(r) for r in game_results]
    return results, rows


def evaluate_candidate(
    candidate: Candidate,
    a: EvalArgs,
    cache: dict[str, Agent] | None = None,
    progress: Progress | None = None,
) -> tuple[dict[str, Any], list[MatchResult]]:
    """Play and measure one candidate: (JSON-able report, MatchResults). `cache` holds
    model-backed opponents to reuse across candidates; `progress` gets a line as each
    part starts and ends."""
    cache = {} if cache is None else cache
    progress = progress or (lambda _: None)
    t0 = time.perf_counter()
    source = _source(candidate)
    config = source.config if source else {}
    policy = invalid_policy(a.invalid_policy or str(config.get("invalid_move_policy", "spiral")))
    before = {k: agent.stats() for k, agent in cache.items() if isinstance(agent, ApiAgent)}
    results, rows = _play(candidate, a, cache, policy, progress)
    metrics = results_metrics(results)
    api = {
        k: _api_delta(before.get(k), agent)
        for k, agent in cache.items()
        if isinstance(agent, ApiAgent)
    }
    metrics.update({f"eval/api/{k}/retries": float(v["retries"]) for k, v in api.items()})
    report: dict[str, Any] = {
        "candidate": {
            "name": candidate.name,
            "checkpoint": str(source.checkpoint) if source and source.checkpoint else None,
            "step": source.step if source else 0,
            "model": source.model if source else None,
        },
        "settings": {
            "env_ids": list(a.env_ids),
            "opponents": list(a.opponents),
            "games_per_seat": a.games_per_seat,
            "seed": a.seed,
            "invalid_policy": policy.name,
            "sampling": asdict(candidate.params),
            "prompt": asdict(candidate.spec),
        },
        "results": rows,
        "api": api,
        "exploitability": (
            _exact_reports(candidate, a.env_ids, progress) if a.exploitability else None
        ),
        "math": None,
    }
    for game_id, found in (report["exploitability"] or {}).items():
        numbers = found.items()
        metrics.update({f"eval/{game_id}/{k}": v for k, v in numbers if _number(v)})
    if isinstance(candidate, MixturePolicy):
        report["candidate"]["members"] = [str(m.source.checkpoint) for m in candidate.members]
    if a.math and isinstance(candidate, LLMPolicy):
        progress(f"{candidate.name}: math ({', '.join(a.math)}) ...")
        report["math"] = _math(candidate, a)
        metrics.update(report["math"])
    report["metrics"] = metrics
    report["time_s"] = time.perf_counter() - t0
    return report, results


def _math(candidate: LLMPolicy, a: EvalArgs) -> dict[str, float]:
    from spiral.evaluation.mathbench.benchmark import run_math_benchmarks

    sampler = candidate.sampler
    return run_math_benchmarks(
        sampler,
        sampler.tokenizer,
        list(a.math),
        limit=a.math_limit,
        max_tokens=a.math_max_tokens,
        seed=a.seed,
    )


def _exact_reports(
    candidate: Candidate, env_ids: Sequence[str], progress: Progress
) -> dict[str, dict[str, Any]]:
    """Exact exploitability of the candidate as it plays here, per game that allows it:
    at its sampling temperature (greedy play is not a distribution, so T <= 0 is scored
    at T = 1); a mixture's is its members' reach-weighted average (`mixture.py`)."""
    t = candidate.params.temperature if candidate.params.temperature > 0 else 1.0
    found = {}
    if isinstance(candidate, MixturePolicy):
        for game_id in (g for g in env_ids if g in EXACT_EXPLOITABILITY and g not in MIXTURE_GAMES):
            progress(f"{candidate.name}: no exact exploitability of a mixture in {game_id}")
        for game_id in (g for g in env_ids if g in MIXTURE_GAMES):
            progress(f"{candidate.name}: exact exploitability of {game_id} ...")
            started = time.monotonic()

            def members(done: int, total: int, game_id: str = game_id) -> None:
                progress(f"{candidate.name}: {game_id}: {done}/{total} members scored")

            report = mixture_exploitability(game_id, candidate.members, t, members)
            found[game_id] = {**report, "temperature": t, "seconds": time.monotonic() - started}
        return found
    for game_id in (g for g in env_ids if g in EXACT_EXPLOITABILITY):
        progress(f"{candidate.name}: exact exploitability of {game_id} ...")
        started = time.monotonic()

        def scored(done: int, total: int, game_id: str = game_id, started: float = started) -> None:
            took = time.monotonic() - started
            progress(f"{candidate.name}: {game_id}: {done}/{total} positions scored ({took:.0f} s)")

        report = EXACT_EXPLOITABILITY[game_id].measure(candidate, t, scored)
        found[game_id] = {**report, "temperature": t, "seconds": time.monotonic() - started}
    return found


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"  # result_row writes unknown as None


def format_report(report: Mapping[str, Any], results: Sequence[MatchResult]) -> str:
    """The printed summary: rates table, lengths and API calls, Kuhn and math numbers."""
    lines = [f"candidate: {report['candidate']['name']}", results_table(results), ""]
    cols = ("mean return", "mean length", "response tok", "opp invalid")
    head = f"{'game':<22}{'opponent':<14}{'seat':>4}" + "".join(f"{c:>14}" for c in cols)
    lines += [head, "-" * len(head)]
    for row in sorted(report["results"], key=lambda r: (r["game_id"], r["opponent"], r["seat"])):
        lines.append(
            f"{row['game_id']:<22}{row['opponent']:<14}{row['seat']:>4}"
            f"{_signed(row.get('mean_return')):>14}{row['mean_game_length']:>14.2f}{row['mean_response_tokens']:>14.1f}"
            f"{row['opponent_invalid']:>14}"
        )
    for label, s in report["api"].items():
        lines.append(f"api {label}: {s['calls']} calls, {s['retries']} retried after an error")
    for game_id, e in (report["exploitability"] or {}).items():
        lines.append(
            f"{game_id} exploitability {e['exploitability']:.4f} at temperature "
            f"{e['temperature']:g} (NashConv {e['nash_conv']:.4f}; Nash = 0, uniform random = "
            f"{EXACT_EXPLOITABILITY[game_id].uniform:.4f})"
        )
        gains = sorted(k for k in e if k.startswith("br_gain_"))
        if gains:  # br_gain_seat0_round1 -> "seat 0 round 1 0.1234"
            where = ", ".join(
                "seat {} round {} ".format(*re.findall(r"\d+", k)) + f"{e[k]:.4f}" for k in gains
            )
            lines.append(f"  where a best responder gains: {where}")
    if report["math"]:
        lines += [f"{k}: {v:.4f}" for k, v in sorted(report["math"].items()) if "accuracy" in k]
    return "\n".join(lines)


def default_out(candidate: Candidate, a: EvalArgs) -> Path:
    """RUN/eval/<checkpoint>_<settings>.json for a run's checkpoint, else the same name in
    the working folder; never an existing file (`spiral.evaluation.outputs`)."""
    source = _source(candidate)
    run = run_folder(source.checkpoint if source is not None else None)
    tag = settings_tag(a.env_ids, a.opponents, a.seed)
    name = f"{candidate_part(candidate.name)}_{tag}.json"
    return fresh((run / "eval" if run is not None else Path()) / name)


def write_json(path: Path, data: Any, printed: bool = True) -> Path:
    """The result file; a write the disk or device refuses (a full disk, /dev/full) is
    one line saying whether the results were printed above (`printed`: standard output
    took them) or are lost."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    except OSError as err:
        where = "they are printed above" if printed else "standard output refused them too"
        raise UnwritablePath(
            f"cannot write the results to {path}: {err.strerror or err}; {where}: free space "
            "or choose another out, and run the evaluation again to keep them as a file"
        ) from None
    return path
