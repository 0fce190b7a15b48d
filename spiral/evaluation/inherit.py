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

A league (`league=true`) plays the checkpoints against each other: it takes the run's
games and games per seat, not its opponents or exploitability. Exploitability taken from
the run is switched off, with a note, where OpenSpiel is not installed: the user did not
ask for it. Without a run (a model folder, a hub id, `checkpoint=base`) the defaults are
TicTacToe-v0 against `random`, 16 games per seat, no exploitability.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import chz

from spiral.agents.model_agent import SPEC_KEYS, checkpoint_config, resolve_source
from spiral.analysis.exploitability import INSTALL_HINT, KUHN_GAME_ID
from spiral.analysis.leduc import LEDUC_GAME_ID
from spiral.evaluation.eval_args import DEFAULT_GAMES, EvalArgs, parse_eval_args

DEFAULT_ENV_IDS = ("TicTacToe-v0",)
DEFAULT_OPPONENTS = ("random",)
# Run keys the checkpoint agent applies, by the eval key that overrides each (None: no
# eval key; the run's value always holds). Listed as taken unless overridden.
AGENT_KEYS: dict[str, str | None] = {
    **{key: key for key in SPEC_KEYS if key not in ("system_rules", "think_budget")},
    "system_rules": None,
    "think_budget": None,
    "eval_temperature": "temperature",
    "max_tokens": "max_tokens",
    "top_p": None,
    "stop": None,
    "max_turns": "max_turns",
    "dtype": "dtype",
    "invalid_move_policy": "invalid_policy",
}
# Values of the keys without an eval override that are not worth a word (the defaults).
QUIET: dict[str, tuple[Any, ...]] = {
    "system_rules": (None, False),
    "think_budget": (None, 0),
    "top_p": (None, 1.0),
    "stop": (None, [], ()),
    "max_turns": (None, 0),
}


@dataclass(frozen=True)
class Inherited:
    """The arguments with the run's settings filled in, and what the user should know."""

    args: EvalArgs
    taken: tuple[str, ...]  # `key=value` for each setting taken from the run
    notes: tuple[str, ...] = ()  # a setting taken and then changed, with the reason
    has_run: bool = False


def run_config(a: EvalArgs) -> dict[str, Any]:
    """The saved config of the run being evaluated ({} for a model without a run): for
    `run=`, its newest checkpoint's (what its checkpoints were trained with), else its
    config.json."""
    if not a.run:
        return dict(resolve_source(a.checkpoint, a.model_name).config)
    found = checkpoint_config(Path(a.run))
    if found:
        return found
    try:
        config = json.loads((Path(a.run) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def _shown(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)


def inherit(a: EvalArgs, config: Mapping[str, Any]) -> Inherited:
    """`a` with its unset keys filled from the run's `config` (see the module docstring)."""
    taken: dict[str, Any] = {}
    notes: list[str] = []
    env_ids = a.env_ids or tuple(config.get("eval_env_ids") or config.get("env_ids") or ())
    opponents = a.opponents or (() if a.league else tuple(config.get("eval_opponent_names") or ()))
    games = a.games or config.get("eval_games")
    for key, mine, value in (
        ("env_ids", a.env_ids, env_ids),
        ("opponents", a.opponents, opponents),
        ("games", a.games, games),
    ):
        if not mine and value:
            taken[key] = _shown(value)
    env_ids = env_ids or DEFAULT_ENV_IDS
    exploitability = a.exploitability
    if exploitability is None:
        measured = bool(config.get("eval_exploitability")) and not a.league
        exploitability = measured and bool({KUHN_GAME_ID, LEDUC_GAME_ID} & set(env_ids))
        if exploitability and importlib.util.find_spec("pyspiel") is None:
            exploitability = False
            notes.append(f"exploitability off: it needs OpenSpiel ({INSTALL_HINT})")
        elif exploitability:
            taken["exploitability"] = "true"
    for key, arg in AGENT_KEYS.items():
        overridden = arg is not None and getattr(a, arg) not in (None, "")
        if config.get(key) in QUIET.get(key, (None, "", [], ())) or overridden:
            continue  # nothing to say: unset, or the value every prompt has unless set
        taken[arg or key] = _shown(config[key])
    filled = chz.replace(
        a,
        env_ids=tuple(env_ids),
        opponents=tuple(opponents or DEFAULT_OPPONENTS),
        games=int(games or DEFAULT_GAMES),
        exploitability=exploitability,
    )
    items = tuple(f"{key}={value}" for key, value in taken.items())
    return Inherited(filled, items, tuple(notes), has_run=bool(config))


def eval_args(argv: Sequence[str]) -> Inherited:
    """`spiral eval`'s key=value words -> the arguments with the run's settings filled in
    (`inherit`)."""
    a = parse_eval_args(argv)
    return inherit(a, run_config(a))


def inherited_lines(found: Inherited) -> list[str]:
    """What `spiral eval` prints before it checks and plays."""
    if not found.has_run:
        lines = ["no run config: evaluating with the defaults and the keys given"]
    elif not found.taken:
        lines = ["every setting given here; nothing taken from the run's config"]
    else:
        lines = ["from the run's config (pass key=value to change any): " + " ".join(found.taken)]
    return lines + list(found.notes)
