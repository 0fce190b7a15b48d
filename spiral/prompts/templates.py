"""Named prompt templates and the answer instructions they carry.

A template turns (observation, instruction, optional system text) into the exact prompt
string a model sees. It has two parts, both small registries:

- a *content* style: what the user message says. "game" is the original SPIRAL wording
  ("You are playing a two-player zero-sum game. Make valid actions to win.\\nObservation:
  ...\\n<instruction>"); "question" is the original's math wording ("Question: ...").
- a *chat format*: how messages become one string. "chatml" (<|im_start|>), "llama3"
  (header ids), "plain" (no special tokens), or "tokenizer": the tokenizer's own chat
  template via `apply_chat_template(..., tokenize=False, add_generation_prompt=True)`.

Choices:
- `qwen3` reproduces the original raw string byte for byte when given the boxed
  instruction and no system text (a test pins it). It shares ChatML with `chatml`; the two
  names give the same bytes and both exist so configs written for the original still work.
- The instruction depends on the answer format. "boxed" is the original sentence.
  "bracket" is one short sentence: measured with SmolLM2-135M-Instruct, the original boxed
  prompt gave 0/32 valid TicTacToe moves and a short bracket prompt 34/64, because small
  models follow a short concrete request and copy the example's shape.
- Text is joined with f-strings, never `str.format` on the template, so braces in an
  observation (or the literal `\\boxed{}`) are never read as fields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from spiral.errors import SpiralError
from spiral.prompts.spec import TEMPLATE_NAMES, AnswerFormat

GAME_PREAMBLE = "You are playing a two-player zero-sum game. Make valid actions to win."
BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."

ContentStyle = Literal["game", "question"]
ChatFormat = Literal["chatml", "llama3", "plain", "tokenizer"]
Message = dict[str, str]


@dataclass(frozen=True)
class Template:
    """A named pairing of a content style and a chat format."""

    name: str
    content: ContentStyle
    chat: ChatFormat
    doc: str


def _game_content(observation: str, instruction: str) -> str:
    return f"{GAME_PREAMBLE}\nObservation: {observation}\n{instruction}"


def _question_content(observation: str, instruction: str) -> str:
    return f"Question: {observation}\n{instruction}"


_CONTENT: dict[ContentStyle, Callable[[str, str], str]] = {
    "game": _game_content,
    "question": _question_content,
}


def _chatml(messages: list[Message], tokenizer: Any) -> str:
    body = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return f"{body}<|im_start|>assistant\n"


def _llama3(messages: list[Message], tokenizer: Any) -> str:
    body = "".join(
        f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content']}<|eot_id|>"
        for m in messages
    )
    return f"<|begin_of_text|>{body}<|start_header_id|>assistant<|end_header_id|>\n\n"


def _plain(messages: list[Message], tokenizer: Any) -> str:
    # No special tokens at all: for base models and for tokenizers without chat markup.
    return "\n\n".join(m["content"] for m in messages) + "\n"


class ChatTemplateError(SpiralError, ValueError):
    """The tokenizer's own chat template raised (or tried to leave Jinja's sandbox)."""


def _tokenizer_chat(messages: list[Message], tokenizer: Any) -> str:
    named = ", ".join(n for n in TEMPLATES if n != "chat")
    if tokenizer is None:
        raise ValueError(
            "template 'chat' uses the tokenizer's own chat template, but no tokenizer was "
            f"given; pass tokenizer=... or pick a named template: {named}"
        )
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"template 'chat': tokenizer {type(tokenizer).__name__} has no chat_template "
            f"(a base model?); pick a named template instead: {named}"
        )
    from jinja2.exceptions import TemplateError

    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except TemplateError as err:
        raise ChatTemplateError(
            f"template 'chat': the tokenizer's chat template failed on this prompt ({err}); "
            f"pick a named template instead: {named}"
        ) from err
    if not isinstance(text, str):
        raise TypeError(f"apply_chat_template returned {type(text).__name__}, expected str")
    return text


_CHAT: dict[ChatFormat, Callable[[list[Message], Any], str]] = {
    "chatml": _chatml,
    "llama3": _llama3,
    "plain": _plain,
    "tokenizer": _tokenizer_chat,
}

TEMPLATES: dict[str, Template] = {
    t.name: t
    for t in (
        Template("chat", "game", "tokenizer", "the tokenizer's own chat template"),
        Template("qwen3", "game", "chatml", "the original SPIRAL game template (ChatML)"),
        Template("qwen3_general", "question", "chatml", "the original math template"),
        Template("chatml", "game", "chatml", "ChatML markup (<|im_start|>role ...)"),
        Template("llama3", "game", "llama3", "Llama-3 header markup, with <|begin_of_text|>"),
        Template("plain", "game", "plain", "no special tokens (base models)"),
    )
}
assert tuple(TEMPLATES) == TEMPLATE_NAMES, "spiral.prompts.spec.TemplateName: list every template"


def template_names() -> list[str]:
    return list(TEMPLATES)


def get_template(name: str) -> Template:
    if name not in TEMPLATES:
        raise KeyError(f"unknown prompt template {name!r}; valid: {', '.join(TEMPLATES)}")
    return TEMPLATES[name]


def render(
    template: str,
    observation: str,
    instruction: str,
    system: str | None = None,
    tokenizer: Any = None,
) -> str:
    """The prompt string for one turn: `system` (if any) as a system message, then the
    template's user message built from `observation` and `instruction`, then the start of
    the assistant's reply. `tokenizer` is needed only by the `chat` template."""
    spec = get_template(template)
    messages: list[Message] = []
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": _CONTENT[spec.content](observation, instruction)})
    return _CHAT[spec.chat](messages, tokenizer)


def render_chat(messages: list[Message], template: str, tokenizer: Any = None) -> str:
    """Arbitrary chat `messages` ({"role", "content"} dicts) in `template`'s markup, ending
    with the start of the assistant's reply; the template's content style is not applied
    (for serving chats and for callers that write their own user message)."""
    return _CHAT[get_template(template).chat](list(messages), tokenizer)


# ---- instructions ------------------------------------------------------------------


def _boxed_instruction(example: str, think_budget: int) -> str:
    return BOXED_INSTRUCTION


def _bracket_instruction(example: str, think_budget: int) -> str:
    return (
        "Answer with exactly one of the available moves, written in square brackets, "
        f"e.g. {example}."
    )


def _constrained_instruction(example: str, think_budget: int) -> str:
    if think_budget == 0:
        # The prompt itself ends with the answer marker, so the reply *is* the move.
        return f"Reply with exactly one of the available moves in square brackets, e.g. {example}."
    return (
        "Think briefly, then write 'Move:' followed by exactly one of the available moves "
        f"in square brackets, e.g. Move: {example}."
    )


INSTRUCTIONS: dict[AnswerFormat, Callable[[str, int], str]] = {
    "boxed": _boxed_instruction,
    "bracket": _bracket_instruction,
    "constrained": _constrained_instruction,
}


def _focused_moves(legal: list[str]) -> str:
    return f"Your legal moves: {', '.join(legal)}."


_FOCUSED: dict[AnswerFormat, Callable[[list[str], int], str]] = {
    "boxed": lambda legal, budget: f"{_focused_moves(legal)}\n{BOXED_INSTRUCTION}",
    "bracket": lambda legal, budget: f"{_focused_moves(legal)} Answer with one of them.",
    "constrained": lambda legal, budget: (
        f"{_focused_moves(legal)} Answer with one of them."
        if budget == 0
        else f"{_focused_moves(legal)} Think briefly, then write 'Move:' and one of them."
    ),
}


def focused_instruction(
    answer_format: AnswerFormat, legal: list[str], think_budget: int = 0
) -> str:
    """The "focused" style's closing lines: the legal moves, in the game's order, and how
    to answer, with no example move (an example is copied by small models)."""
    if answer_format not in _FOCUSED:
        raise KeyError(f"unknown answer format {answer_format!r}; valid: {', '.join(_FOCUSED)}")
    return _FOCUSED[answer_format](legal, think_budget)


def instruction_for(
    answer_format: AnswerFormat, example: str = "[4]", think_budget: int = 0
) -> str:
    """The sentence telling the model how to answer. `example` is a well-formed move of the
    game (build_prompt passes the first legal move) shown as the pattern to copy."""
    if answer_format not in INSTRUCTIONS:
        raise KeyError(f"unknown answer format {answer_format!r}; valid: {', '.join(INSTRUCTIONS)}")
    return INSTRUCTIONS[answer_format](example, think_budget)
