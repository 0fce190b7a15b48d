"""Recipes: a training run as code. Each module's `config()` returns a typed
`TrainConfig`, its docstring the command and what it measured; `spiral train
recipe=NAME` (or the older `preset=NAME`) applies it before the keys given, which
override it. `words(NAME)` is the recipe as `key=value` pairs: only the keys it sets
away from the defaults, in the one vocabulary of the command line and config.json.

`FOLLOWING` holds the defaults that follow another key's value, applied where neither the
recipe nor the user set the key: rows played by older weights need a trust region (with a
staleness bound of two the Kuhn recipe left the card-blind plateau in 2 of 5 seeds without
it, 0.253 +- 0.098 at step 120, and in 5 of 5 with it, 0.099 +- 0.030; docs/results.md,
"Async actor-learner"). The sync loop's fresh rows sit below it, so there it never acts.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from spiral.train.recipes.embedded_kuhn import config as embedded_kuhn
from spiral.train.recipes.embedded_leduc import config as embedded_leduc
from spiral.train.recipes.embedded_tictactoe import config as embedded_tictactoe
from spiral.train.recipes.qwen3_4b_spiral import config as qwen3_4b_spiral
from spiral.train.train_config import TrainConfig

RECIPES: dict[str, Callable[[], TrainConfig]] = {
    "embedded-kuhn": embedded_kuhn,
    "embedded-leduc": embedded_leduc,
    "embedded-tictactoe": embedded_tictactoe,
    "qwen3-4b-spiral": qwen3_4b_spiral,
}

FOLLOWING: dict[tuple[str, str], dict[str, str]] = {
    ("use_async_actor_learner", "true"): {"lr_kl_target": "0.05"},
}


def summary(name: str) -> str:
    """The first line of a recipe's docstring."""
    doc = importlib.import_module(RECIPES[name].__module__).__doc__ or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def words(name: str) -> dict[str, str]:
    """The recipe's keys that differ from the defaults, as command-line values."""
    mine, default = RECIPES[name]().to_json(), TrainConfig().to_json()
    return {k: _word(v) for k, v in mine.items() if v != default.get(k)}


def all_words() -> dict[str, dict[str, str]]:
    return {name: words(name) for name in RECIPES}


def following_defaults(given: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The `FOLLOWING` values that `given` (recipe expanded, last value of a key wins)
    calls for and does not set itself."""
    last = {key: value for key, value in given}
    out: list[tuple[str, str]] = []
    for (key, value), follows in FOLLOWING.items():
        if last.get(key, "").strip().lower() == value:
            out += [(k, v) for k, v in follows.items() if k not in last]
    return out


def _word(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(_word(v) for v in value)
    if isinstance(value, float):
        return repr(value)
    return str(value)
