"""`spiral train`'s front door: `key=value` words -> a validated `TrainConfig`
(`train_config.py`), and `--help`.

`recipe=NAME` (`recipes/`) applies a recipe's keys first and the keys given override them;
Spiral's earlier spellings are folded into today's keys (`legacy_keys.py`); the defaults
that other keys' values call for (`recipes.FOLLOWING`) come last. Unknown keys and bad
values raise `ConfigError` with the valid choices.
"""

from __future__ import annotations

from collections.abc import Sequence

from spiral.args import UsageError, parse_command
from spiral.args import field_docs as command_field_docs
from spiral.args import help_text as command_help
from spiral.errors import did_you_mean
from spiral.train import legacy_keys
from spiral.train.recipes import RECIPES, following_defaults, summary, words
from spiral.train.train_config import (
    EXACT_KEYS,
    RETIRED_HINT,
    RETIRED_KEYS,
    RETIRED_VALUES,
    ConfigError,
    TrainConfig,
    retired_option,
)

__all__ = [
    "EXACT_KEYS",
    "RETIRED_HINT",
    "RETIRED_KEYS",
    "RETIRED_VALUES",
    "ConfigError",
    "TrainConfig",
    "expanded",
    "field_docs",
    "help_text",
    "parse_config",
    "retired_option",
]


def field_docs() -> list[tuple[str, str, str]]:
    """(name, default, doc) for every config field, for `--help` and the docs."""
    return command_field_docs(TrainConfig)


def expanded(argv: Sequence[str]) -> dict[str, str]:
    """The words a command line stands for: the recipe's keys first, the keys given over
    them, earlier names folded into today's (`legacy_keys`), then the defaults that other
    keys' values call for (`recipes.FOLLOWING`). Words without `=` are left to the parser."""
    pairs = [(k, v) for k, sep, v in (w.partition("=") for w in argv) if sep]
    name = recipe_name(pairs)
    given = {("recipe" if k == "preset" else k): v for k, v in pairs}
    merged = legacy_keys.fold({**(words(name) if name else {}), **given}, typed=set(given))
    return {**merged, **dict(following_defaults(list(merged.items())))}


def recipe_name(pairs: Sequence[tuple[str, str]]) -> str:
    """The recipe that `recipe=` (or the original's `preset=`) names, "" for none; two
    different names, or one that is no recipe, are one line."""
    names = {v for k, v in pairs if k in ("recipe", "preset")}
    if len(names) > 1:
        raise ConfigError(f"recipe= and preset= name {' and '.join(sorted(names))}: give one")
    name = names.pop() if names else ""
    if name and name not in RECIPES:
        raise ConfigError(f"unknown recipe {name!r}; {did_you_mean(name, sorted(RECIPES))}")
    return name


def help_text(argv: Sequence[str] = ()) -> str:
    """`spiral train [recipe=NAME key=value ...] --help`: the core keys, showing the values
    that the recipe and the other keys given set in place of the defaults, and the recipes;
    `--help all` every key."""
    recipe_name([(k, v) for k, sep, v in (w.partition("=") for w in argv) if sep])
    try:
        given = expanded(argv)
    except UsageError:
        given = {}  # a value parsing refuses: it says so; help shows what it can
    recipes = [f"  {name}: {summary(name)}" for name in RECIPES]
    epilog = "\n".join(
        ["recipes (spiral/train/recipes/; recipe=NAME, keys given override):", *recipes]
    )
    core_only = "all" not in argv
    return command_help(TrainConfig, "train", epilog, given, core_only=core_only)


def parse_config(argv: Sequence[str]) -> TrainConfig:
    """A validated TrainConfig from `key=value` strings (`recipe=NAME` first, then the
    rest; the shared front door, spiral.args.parse_command). A retired key is named as
    retired, not as unknown."""
    for word in argv:
        key, _, value = word.partition("=")
        if key in RETIRED_KEYS or key in EXACT_KEYS or value in RETIRED_VALUES.get(key, ()):
            what = "always on now" if key in EXACT_KEYS else RETIRED_HINT
            raise ConfigError(f"{key}={value}: {what}; drop it")
    plain = [w for w in argv if "=" not in w]  # refused by the parser, with its message
    words = [f"{k}={v}" for k, v in expanded(argv).items()]
    return parse_command(TrainConfig, [*plain, *words], "train")
