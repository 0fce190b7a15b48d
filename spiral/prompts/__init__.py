"""The prompts layer: what the model sees and how its reply becomes a move.

- spec.py: `PromptSpec` (template, answer format, observation style, system rules).
- templates.py: named templates (`qwen3`, `qwen3_general`, `chatml`, `llama3`, `plain`,
  `chat` = the tokenizer's own) and the per-format instructions.
- render.py: `build_prompt`, `encode` (one BOS at most), `constraint_for`.
- extract.py / parse.py: `\\boxed{}` and `[...]` extraction, `parse_move`.
- invalid.py: the declared invalid-move policy.
"""

from spiral.prompts.extract import extract_boxed, find_bracketed, normalize_answer
from spiral.prompts.invalid import (
    DEFAULT_INVALID_POLICY,
    INVALID_POLICIES,
    InvalidMovePolicy,
    invalid_policy,
)
from spiral.prompts.parse import parse_move
from spiral.prompts.render import (
    answer_marker,
    build_prompt,
    constraint_for,
    encode,
    prefix_free,
)
from spiral.prompts.spec import ANSWER_FORMATS, AnswerFormat, PromptSpec
from spiral.prompts.templates import (
    BOXED_INSTRUCTION,
    TEMPLATES,
    Template,
    get_template,
    instruction_for,
    render,
    template_names,
)

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
    "render",
    "template_names",
]
