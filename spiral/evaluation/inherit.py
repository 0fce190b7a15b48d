"""What `spiral eval` takes from the run it evaluates.

A checkpoint is evaluated as it was trained: the keys a user leaves unset come from the
run's saved config (a checkpoint's `loop_state.json`, or `RUN/config.json` for `run=`),
and `inherit` says which ones it took, so the printed line shows what was measured.

- games and opponents: the run's evaluation games (`eval_env_ids`, else `env_ids`) and
  opponents (`eval_opponent_names`), and `eval_games` games per seat;
- exploitability: on where training measured it (`eval_exploitability` and
  KuhnPokerSingle-v0 among the games), off elsewhere: TicTacToe's exact search takes
  minutes, so it runs only when asked for;
- the prompt (template, answer format, prompt style, system rules, think budget, per-game
  observation style), the sampling (eval temperature, top_p, max_tokens, stop strings),
  the invalid-move policy, `max_turns` and the dtype come with the checkpoint agent
  (`spiral.agents.model_agent`); they are listed here too.

Without a run (a model folder, a hub id, `checkpoint=base`) the defaults are TicTacToe-v0
against `random`, 16 games per seat, no exploitability.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import chz

from spiral.agents.model_agent import resolve_source
from spiral.evaluation.exploitability import KUHN_GAME_ID
from spiral.evaluation.run import DEFAULT_GAMES, EvalArgs, EvalError, parse_eval_args

DEFAULT_ENV_IDS = ("TicTacToe-v0",)
DEFAULT_OPPONENTS = ("random",)
# Run keys the checkpoint agent applies itself, shown as inherited unless overridden.
AGENT_KEYS = {
    "template": "template",
    "answer_format": "answer_format",
    "prompt_style": "prompt_style",
    "eval_temperature": "temperature",
    "max_tokens": "max_tokens",
    "dtype": "dtype",
    "invalid_move_policy": "invalid_policy",
}


def run_config(a: EvalArgs) -> dict[str, Any]:
    """The saved config of the run being evaluated ({} for a model without a run)."""
    if a.run:
        path = Path(a.run) / "config.json"
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise EvalError(
                f"{a.run} has no config.json; pass the run folder `spiral train` wrote"
            ) from None
        except (OSError, ValueError) as err:
            raise EvalError(f"{path} is unreadable ({err}); pass keys explicitly") from err
        if not isinstance(config, dict):
            raise EvalError(f"{path} is not a config (a JSON object); pass keys explicitly")
        return config
    return dict(resolve_source(a.checkpoint, a.model_name).config)


def inherit(a: EvalArgs, config: Mapping[str, Any]) -> tuple[EvalArgs, list[str]]:
    """`a` with its unset keys filled from the run's `config`, and `key=value` for each
    value taken from the run."""
    taken: dict[str, Any] = {}
    env_ids = a.env_ids or tuple(config.get("eval_env_ids") or config.get("env_ids") or ())
    opponents = a.opponents or tuple(config.get("eval_opponent_names") or ())
    games = a.games or config.get("eval_games")
    if not a.env_ids and env_ids:
        taken["env_ids"] = ",".join(env_ids)
    if not a.opponents and opponents:
        taken["opponents"] = ",".join(opponents)
    if a.games is None and games:
        taken["games"] = games
    env_ids = env_ids or DEFAULT_ENV_IDS
    exploitability = a.exploitability
    if exploitability is None:
        exploitability = bool(config.get("eval_exploitability")) and KUHN_GAME_ID in env_ids
        if exploitability:
            taken["exploitability"] = "true"
    for key, arg in AGENT_KEYS.items():
        if key in config and getattr(a, arg) in (None, ""):
            taken[arg] = config[key]
    filled = chz.replace(
        a,
        env_ids=tuple(env_ids),
        opponents=tuple(opponents or DEFAULT_OPPONENTS),
        games=int(games or DEFAULT_GAMES),
        exploitability=exploitability,
    )
    return filled, [f"{key}={value}" for key, value in taken.items()]


def eval_args(argv: Sequence[str]) -> tuple[EvalArgs, list[str]]:
    """`spiral eval`'s key=value words -> the arguments with the run's settings filled in,
    and what was taken from the run (`inherit`)."""
    a = parse_eval_args(argv)
    return inherit(a, run_config(a))


def inherited_line(taken: list[str]) -> str:
    """The line `spiral eval` prints before it plays."""
    if not taken:
        return "no run config: evaluating with the defaults and the keys given"
    return "from the run's config (pass key=value to change any): " + " ".join(taken)
