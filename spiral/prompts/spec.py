"""PromptSpec: how a game state becomes a prompt and how the reply is read back.

One frozen value carries every prompt choice so that the rollout, the evaluator and the
config agree: the template name, the answer format, the observation style, whether the
rules go into a system message, and (constrained format only) a free reasoning budget.

Answer formats (a closed set):
- "boxed": the original SPIRAL convention, reason freely and put the move in the last
  `\\boxed{...}`.
- "bracket" (the default): a short request for one bracketed move; the last legal
  `[...]` wins. Small models manage this far more often than `\\boxed{}` (measured:
  templates.py).
- "constrained": the reply is forced to be exactly one legal move right after an answer
  marker ("\\nMove:"), optionally after `think_budget` free tokens. The sampler enforces
  it with an `AnswerConstraint` (see spiral/prompts/render.py: constraint_for).

Prompt styles: "original" keeps the game's observation and the format's instruction with
an example move; "focused" ends the prompt with the game's `situation(seat)` and the
legal moves; "brief" replaces observation and rules with the game's `brief(seat)` (the
rules in one sentence and the position: ~125 tokens a TicTacToe turn with the embedded
model's chat template against ~256 focused, docs/results.md "TicTacToe"), falling back to
focused for games without one. `tests/golden_prompts/` pins the text of each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from spiral.games.base import ObsStyle

AnswerFormat = Literal["boxed", "bracket", "constrained"]
ANSWER_FORMATS: tuple[AnswerFormat, ...] = get_args(AnswerFormat)
# "original": the game's observation and the format's instruction with an example move,
# byte for byte as before. "focused": the observation, then the game's statement of the
# situation (`State.situation`: Kuhn's betting so far and your card) right before the
# answer, and the legal moves listed without an example that anchors the choice.
# "brief": the game's `State.brief` (its rules in one sentence and the position) and the
# legal moves, nothing else: the shortest prompt, for games that define it (TicTacToe,
# single-hand Kuhn); other games get the focused prompt.
PromptStyle = Literal["original", "focused", "brief"]
# The names of spiral.prompts.templates.TEMPLATES (checked there at import).
TemplateName = Literal["chat", "qwen3", "qwen3_general", "chatml", "llama3", "plain"]
TEMPLATE_NAMES: tuple[TemplateName, ...] = get_args(TemplateName)
PROMPT_STYLES: tuple[PromptStyle, ...] = get_args(PromptStyle)
OBS_STYLES: tuple[str, ...] = get_args(ObsStyle)
# The text right before the move in the constrained format. No trailing space on purpose:
# BPE tokenizers glue a space to the next word, so " [4]" is the natural continuation.
ANSWER_MARKER = "\nMove:"


@dataclass(frozen=True)
class PromptSpec:
    """Prompt choices. Defaults: the tokenizer's chat template, bracketed answers, the
    game's own observation style, rules inside the observation, no reasoning budget."""

    template: TemplateName = "chat"
    answer_format: AnswerFormat = "bracket"
    obs_style: ObsStyle | None = None  # None: the game's default style
    system_rules: bool = False  # True: the game's rules text goes in a system message
    think_budget: int = 0  # constrained only: free reasoning tokens before the marker
    style: PromptStyle = "original"

    def __post_init__(self) -> None:
        if self.template not in TEMPLATE_NAMES:  # templates.py checks TEMPLATES matches
            raise ValueError(
                f"PromptSpec.template={self.template!r} is unknown; valid: {', '.join(TEMPLATE_NAMES)}"
            )
        if self.answer_format not in ANSWER_FORMATS:
            raise ValueError(
                f"PromptSpec.answer_format={self.answer_format!r} is unknown; "
                f"valid: {', '.join(ANSWER_FORMATS)}"
            )
        if self.obs_style is not None and self.obs_style not in OBS_STYLES:
            raise ValueError(
                f"PromptSpec.obs_style={self.obs_style!r} is unknown; "
                f"valid: None (the game's default), {', '.join(OBS_STYLES)}"
            )
        if self.style not in PROMPT_STYLES:
            raise ValueError(
                f"PromptSpec.style={self.style!r} is unknown; valid: {', '.join(PROMPT_STYLES)}"
            )
        if isinstance(self.think_budget, bool) or not isinstance(self.think_budget, int):
            raise TypeError(f"PromptSpec.think_budget must be an int, got {self.think_budget!r}")
        if self.think_budget < 0:
            raise ValueError(f"PromptSpec.think_budget must be >= 0, got {self.think_budget}")
        if self.think_budget > 0 and self.answer_format != "constrained":
            raise ValueError(
                f"PromptSpec.think_budget={self.think_budget} only applies to "
                f"answer_format='constrained' (got {self.answer_format!r}); set it to 0 or "
                "use the constrained format"
            )


def answer_marker(spec: PromptSpec) -> str:
    """The text right before the move in the constrained format. The same for every spec,
    so a parser finds it in any reply; a function so that a spec may vary it later."""
    return ANSWER_MARKER
