"""The prompts layer: what the model sees and how its reply becomes a move.

- spec.py: `PromptSpec` (template, answer format, observation style, system rules) and
  `answer_marker`.
- templates.py: named templates (`qwen3`, `qwen3_general`, `chatml`, `llama3`, `plain`,
  `chat` = the tokenizer's own), `render`, and the per-format instructions.
- render.py: `build_prompt`, `encode` (one BOS at most), `constraint_for`.
- extract.py / parse.py: `\\boxed{}` and `[...]` extraction, `parse_move`.
- invalid.py: the declared invalid-move policy.

`templates.render` is not re-exported here: `spiral.prompts.render` is the module. The
names from render.py load on first use, so that `python -m spiral.prompts.render` (which
writes the golden prompt files) does not import that module twice.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from spiral.prompts.extract import extract_boxed, find_bracketed, normalize_answer
from spiral.prompts.invalid import (
    DEFAULT_INVALID_POLICY,
    INVALID_POLICIES,
    InvalidMovePolicy,
    invalid_policy,
)
from spiral.prompts.parse import parse_move
from spiral.prompts.spec import ANSWER_FORMATS, AnswerFormat, PromptSpec, answer_marker
from spiral.prompts.templates import (
    BOXED_INSTRUCTION,
    TEMPLATES,
    Template,
    get_template,
    instruction_for,
    render_chat,
    template_names,
)

if TYPE_CHECKING:
    from spiral.prompts.render import build_prompt, constraint_for, encode, prefix_free

_FROM_RENDER = ("build_prompt", "constraint_for", "encode", "prefix_free")


def __getattr__(name: str) -> Any:
    if name in _FROM_RENDER:
        return getattr(importlib.import_module("spiral.prompts.render"), name)
    raise AttributeError(f"module 'spiral.prompts' has no attribute {name!r}")


__all__ = [
    "ANSWER_FORMATS",
    "BOXED_INSTRUCTION",
    "DEFAULT_INVALID_POLICY",
    "INVALID_POLICIES",
    "TEMPLATES",
    "AnswerFormat",
    "InvalidMovePolicy",
    "PromptSpec",
    "Template",
    "answer_marker",
    "build_prompt",
    "constraint_for",
    "encode",
    "extract_boxed",
    "find_bracketed",
    "get_template",
    "instruction_for",
    "invalid_policy",
    "normalize_answer",
    "parse_move",
    "prefix_free",
    "render_chat",
    "template_names",
]
