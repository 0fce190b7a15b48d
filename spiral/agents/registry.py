"""Agent specs -> agents. A small registry of spec prefixes, not an if/elif chain.

- `random`: uniform over legal moves (seeded).
- `optimal`: the scripted strong player registered for the game id (`register_optimal`).
- `checkpoint:PATH` / `api:MODEL`: model-backed agents (modules loaded on first use).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from spiral.agents.base import Agent
from spiral.errors import UsageError

AgentFactory = Callable[..., Agent]
# spec prefix -> "module:function" building the agent; the function takes (arg, **params)
_SPECS: dict[str, str] = {
    "random": "spiral.agents.random_agent:make_random",
    "optimal": "spiral.agents.scripted:make_optimal",
    "checkpoint": "spiral.agents.model_agent:make_checkpoint_agent",
    "api": "spiral.agents.api_agent:make_api_agent",
}


def specs() -> list[str]:
    return sorted(_SPECS)


def make(spec: str, **params: Any) -> Agent:
    """Build an agent from `spec` such as `random`, `optimal`, `checkpoint:runs/x/step_10`.

    `params` go to the agent's factory (e.g. `game_id=`, `seed=`).
    """
    prefix, _, arg = spec.partition(":")
    target = _SPECS.get(prefix)
    if target is None:
        raise KeyError(f"unknown agent spec {spec!r}; valid prefixes: {', '.join(specs())}")
    module_name, _, func_name = target.partition(":")
    factory: AgentFactory = getattr(importlib.import_module(module_name), func_name)
    return factory(arg, **params)


def known_opponents(obj: Any, attr: str) -> None:
    """A chz validator: every agent spec (one or a tuple) names a registered kind."""
    value = getattr(obj, attr)
    for spec in value if isinstance(value, tuple) else (value,):
        if spec.partition(":")[0] not in specs():
            raise UsageError(
                f"{attr.removeprefix('X_')}: unknown opponent {spec!r}; valid kinds: "
                f"{', '.join(specs())} (e.g. random, checkpoint:PATH, api:MODEL)"
            )
