"""`spiral eval`'s arguments: the keys, their help, and the checks made before any model
is loaded (games, opponent specs, paths, math names), so a typo fails in a second with
the valid choices. Keys left unset (None, empty) are filled from the run's config by
`inherit.py`; `run.py` plays with the result.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any, Literal

import chz

from spiral import agents
from spiral.agents.model_agent import resolve_source
from spiral.agents.registry import known_opponents
from spiral.agents.scripted import optimal_problem
from spiral.analysis.exploitability import INSTALL_HINT
from spiral.args import (
    UsageError,
    comma_list,
    device_name,
    non_negative,
    non_negative_or_unset,
    parse_command,
    positive,
    positive_or_unset,
)
from spiral.args import help_text as command_help
from spiral.engines.registry import known_engine
from spiral.evaluation.mathbench.data import math_source_problem
from spiral.evaluation.model_policy import EXACT_EXPLOITABILITY
from spiral.games.registry import check_playable, free_form_problem, known_game_ids
from spiral.prompts.invalid import InvalidPolicyName
from spiral.prompts.spec import AnswerFormat, PromptStyle, TemplateName
from spiral.types import DTypeName

MODEL_PREFIXES = ("checkpoint", "api")  # game-independent opponents, built once
DEFAULT_GAMES = 16  # games per (game, opponent, seat) without a run to inherit from
Weights = Literal["live", "averaged", "mixture"]


class EvalError(UsageError):
    """A bad `spiral eval` argument, with a message saying what to pass instead."""


@chz.chz
class EvalArgs:
    """usage: spiral eval checkpoint=PATH|run=DIR key=value ...

    A checkpoint (or the base model) against opponents, both seats, with 95% Wilson
    intervals; run=DIR compares a run's checkpoints."""

    checkpoint: str = chz.field(
        default="", doc="checkpoint folder, run folder (newest), model folder, or 'base'"
    )
    run: str = chz.field(
        default="", doc="run folder: evaluate its checkpoints and write DIR/eval/compare.*"
    )
    weights: Weights = chz.field(
        default="live",
        doc="which policy of checkpoint= plays: live (its weights) | averaged (its moving "
        "average of the weights, learner/averaged/) | mixture (the run's checkpoints from "
        "mixture_from on, one drawn per game: the average policy of its iterates; "
        "checkpoint=RUN)",
    )
    mixture_from: int | None = chz.field(
        default=None,
        doc="weights=mixture: the first step whose checkpoint joins (None: the later half "
        "of the run's checkpoints)",
        validator=non_negative_or_unset,
    )
    model_name: str = chz.field(
        default="", doc="base model for checkpoint=base (default: the embedded SmolLM2-135M)"
    )
    env_ids: tuple[str, ...] = chz.field(
        default=(),
        doc="games, comma separated (default: the run's evaluation games; TicTacToe-v0 for "
        "a model without a run)",
        validator=known_game_ids,
        blueprint_cast=comma_list,
    )
    opponents: tuple[str, ...] = chz.field(
        default=(),
        doc="random, optimal, checkpoint:PATH, api:MODEL, comma separated (default: the "
        "run's evaluation opponents, else random)",
        validator=known_opponents,
    )
    games: int | None = chz.field(
        default=None,
        doc="games per (game, opponent, seat) (default: the run's eval_games, else 16)",
        validator=positive_or_unset,
    )
    seed: int = chz.field(default=0, doc="base seed: same seed, same deals and sampling")
    temperature: float | None = chz.field(
        default=None,
        doc="sampling temperature, 0 for greedy (None: the run's eval_temperature)",
        validator=non_negative_or_unset,
    )
    max_tokens: int | None = chz.field(
        default=None,
        doc="max new tokens per move (None: the run's max_tokens)",
        validator=positive_or_unset,
    )
    max_turns: int | None = chz.field(
        default=None,
        doc="turn limit per game, both seats' moves, a game reaching it a draw; 0 = none "
        "(None: the run's max_turns)",
        validator=non_negative_or_unset,
    )
    template: TemplateName | None = chz.field(
        default=None, doc="prompt template (None: the run's template)"
    )
    answer_format: AnswerFormat | None = chz.field(
        default=None, doc="answer format (None: the run's answer_format)"
    )
    prompt_style: PromptStyle | None = chz.field(
        default=None, doc="prompt style (None: the run's prompt_style)"
    )
    invalid_policy: InvalidPolicyName | None = chz.field(
        default=None, doc="invalid-move returns (None: the run's invalid_move_policy)"
    )
    exploitability: bool | None = chz.field(
        default=None,
        doc="exact exploitability of the model in each game of env_ids that allows it: "
        "KuhnPokerSingle-v0 and LeducPoker-v0 (OpenSpiel), TicTacToe-v0 (a best-response "
        "search over its 4,520 positions; minutes on a CPU) (None: as the run measured it in "
        "training, i.e. on KuhnPokerSingle-v0 and LeducPoker-v0 when eval_exploitability was on)",
    )
    math: tuple[str, ...] = chz.field(
        default=(), doc="math benchmarks, comma separated (math500, gsm8k, sample:gsm8k, a .jsonl)"
    )
    math_limit: int | None = chz.field(
        default=None, doc="at most this many problems per benchmark (seeded subset)"
    )
    math_max_tokens: int = chz.field(
        default=1024, doc="max new tokens per math answer", validator=positive
    )
    api_base_url: str = chz.field(
        default="https://api.openai.com/v1",
        doc="endpoint for api:MODEL opponents (e.g. http://127.0.0.1:8000/v1)",
    )
    api_key_env: str = chz.field(
        default="OPENAI_API_KEY", doc="environment variable holding the API key (never printed)"
    )
    api_max_tokens: int = chz.field(
        default=1024, doc="max tokens per API reply", validator=positive
    )
    api_max_retries: int = chz.field(
        default=3,
        doc="retries (exponential backoff) on 429 / 5xx / connection errors",
        validator=non_negative,
    )
    every: int = chz.field(
        default=1,
        doc="with run=: evaluate every K-th checkpoint (the newest always)",
        validator=positive,
    )
    league: bool = chz.field(
        default=False,
        doc="with run=: rate the checkpoints against each other (round-robin, both seats, "
        "`games` per ordered pair and game) into DIR/eval/league.json and league.md, "
        "instead of the comparison against opponents",
    )
    device: str = chz.field(default="auto", doc="auto | cpu | cuda | cuda:N", validator=device_name)
    dtype: DTypeName | None = chz.field(
        default=None, doc="weights' precision (None: the run's dtype, else auto)"
    )
    engine: str = chz.field(
        default="torch",
        doc="the engine that samples for checkpoint players (spiral.engines.registry)",
        validator=known_engine,
    )
    out: str = chz.field(
        default="",
        doc="JSON report path (default: RUN/eval/<checkpoint>_<games>_vs_<opponents>_seed<S>.json "
        "for a run's checkpoint); with run=: a folder (default: RUN/eval)",
    )

    @property
    def games_per_seat(self) -> int:
        return self.games or DEFAULT_GAMES

    def validate(self) -> EvalArgs:
        if bool(self.checkpoint) == bool(self.run):
            raise EvalError("give exactly one of checkpoint=PATH (or checkpoint=base) and run=DIR")
        if self.league and not self.run:
            raise EvalError("league=true rates a run's checkpoints: give run=DIR")
        if self.weights != "live" and not self.checkpoint:
            raise EvalError(
                f"weights={self.weights} chooses the policy of checkpoint=: give "
                "checkpoint=RUN (run= compares the live weights of each checkpoint)"
            )
        if self.mixture_from is not None and self.weights != "mixture":
            raise EvalError("mixture_from chooses the iterates of weights=mixture; add it")
        if self.weights == "mixture" and self.math:
            raise EvalError(
                "math benchmarks score one model; weights=mixture is several: evaluate a "
                "checkpoint (weights=live or averaged) for math"
            )
        return self


def help_text() -> str:
    return command_help(EvalArgs, "eval")


def parse_eval_args(args: Sequence[str]) -> EvalArgs:
    """`key=value` strings -> EvalArgs (spiral.args.parse_command)."""
    return parse_command(EvalArgs, args, "eval")


def validate(a: EvalArgs) -> None:
    """Check games, opponents, paths and names before any model is loaded."""
    if not a.env_ids:
        raise EvalError("env_ids is empty; e.g. env_ids=TicTacToe-v0")
    if not a.opponents:
        raise EvalError("opponents is empty; e.g. opponents=random,optimal")
    for game_id in a.env_ids:  # inherited from a run too: each one playable here
        check_playable(game_id, "env_ids")
    problem = free_form_problem(a.env_ids, a.answer_format, a.opponents)
    if problem:
        raise EvalError(problem)
    for key, values in (("env_ids", a.env_ids), ("opponents", a.opponents)):
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise EvalError(f"{key}: {', '.join(twice)} given more than once; give each once")
    for spec in a.opponents:
        prefix, _, arg = spec.partition(":")
        if prefix not in agents.specs():
            raise EvalError(f"unknown opponent {spec!r}; valid kinds: {', '.join(agents.specs())}")
        problem = optimal_problem(spec, a.env_ids)
        if problem:
            raise EvalError(problem)
        if prefix in MODEL_PREFIXES and not arg:
            raise EvalError(f"opponent {spec!r} needs an argument: {prefix}:PATH_OR_NAME")
        if prefix == "checkpoint":
            resolve_source(arg)  # raises CheckpointNotFound with the reason
    if a.exploitability:
        exact = [g for g in a.env_ids if g in EXACT_EXPLOITABILITY]
        if not exact:
            raise EvalError(
                f"exploitability=true, but no game of env_ids={','.join(a.env_ids)} has an exact "
                f"exploitability here; games that do: {', '.join(EXACT_EXPLOITABILITY)}"
            )
        needs = [g for g in exact if EXACT_EXPLOITABILITY[g].needs_openspiel]
        if needs and importlib.util.find_spec("pyspiel") is None:
            raise EvalError(
                f"exploitability=true in {', '.join(needs)} needs OpenSpiel: {INSTALL_HINT}"
            )
    for name in a.math:
        problem = math_source_problem(name)
        if problem:
            raise EvalError(f"math={name}: {problem}")


def candidate_overrides(a: EvalArgs) -> dict[str, Any]:
    """Keyword params for make_checkpoint_agent from the command line."""
    out: dict[str, Any] = {"device": a.device, "engine": a.engine}
    if a.model_name:
        out["model_name"] = a.model_name
    for key in ("template", "answer_format", "prompt_style", "temperature", "max_tokens", "dtype"):
        if getattr(a, key) not in ("", None):
            out[key] = getattr(a, key)
    return out
