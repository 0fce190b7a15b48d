"""What `spiral serve` does with a request before it reaches the model: render the chat,
refuse a prompt that cannot fit (from its length where that suffices, limits.py), tokenise
it and its answer constraint, and check every limit. It runs in the request's own worker
thread, never in the model's (batcher.py), so a huge prompt holds up no one else."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Any

from fastapi.responses import JSONResponse

from spiral.engines.base import Sampler, SamplingParams
from spiral.prompts.render import encode
from spiral.serving.limits import PromptBound
from spiral.serving.openai_api import choice_constraint, error_reply
from spiral.types import AnswerConstraint

Prepared = tuple[list[int], SamplingParams, AnswerConstraint | None]


def render_messages(messages: Sequence[dict[str, str]], template: str, tokenizer: Any) -> str:
    """Prompt text for a chat: the tokenizer's chat template or a named template's markup."""
    from spiral.prompts.templates import _CHAT, get_template

    chat = get_template(template).chat
    return _CHAT[chat](list(messages), tokenizer)


def model_context(sampler: Sampler) -> int | None:
    """The served model's context length in tokens, when its config says."""
    config = getattr(getattr(sampler, "model", None), "config", None)
    value = getattr(config, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None


class Intake:
    """Turns requests into prompts for one served model; `prepare` is safe to call from
    many threads at once (the tokenizer lock keeps one encoding at a time)."""

    def __init__(self, sampler: Sampler, template: str, max_tokens_limit: int) -> None:
        self.tokenizer, self.template = sampler.tokenizer, template
        self.max_tokens_limit = max_tokens_limit
        self.context = model_context(sampler)
        self.bound = PromptBound(self.tokenizer) if self.context is not None else None
        self.lock = threading.Lock()

    def prepare(
        self,
        messages: list[dict[str, str]],
        params: SamplingParams,
        choices: list[str] | None,
        choice_field: str = "guided_choice",
    ) -> Prepared | JSONResponse:
        """Render, bound, tokenise and check one request, outside the model's thread (the
        tokenizer lock keeps one encoding at a time): (prompt ids, params, constraint),
        or the 400 that refuses it (`choice_field`: the field the choices came in)."""
        with self.lock:
            try:
                text = render_messages(messages, self.template, self.tokenizer)
            except ValueError as err:
                return error_reply(400, str(err), "messages")
            if self.bound is not None and self.context is not None:
                refusal = self.bound.refusal(text, max(self.context - params.max_tokens, 0))
                if refusal is not None:
                    return error_reply(400, refusal, "messages")
            prompt_ids = encode(text, self.tokenizer)
            constraint = None
            if choices is not None:
                try:
                    constraint = choice_constraint(choices, self.tokenizer)
                except ValueError as err:
                    return error_reply(400, str(err), choice_field)
        if constraint is not None and choices is not None:
            longest = max(len(c) for c in constraint.choices)
            if longest > self.max_tokens_limit:  # every limit holds after the extension
                name = choices[[len(c) for c in constraint.choices].index(longest)]
                shown = repr(name) if len(name) <= 40 else f"{name[:40]!r}..."
                return error_reply(
                    400,
                    f"the longest guided_choice reply has {longest} tokens ({shown}), "
                    f"above this server's limit of {self.max_tokens_limit} (spiral serve "
                    "max_tokens_limit=...); shorten it",
                    choice_field,
                )
            params = dataclasses.replace(params, max_tokens=longest)  # the reply is one choice
        if self.context is not None and len(prompt_ids) + params.max_tokens > self.context:
            return error_reply(
                400,
                f"the prompt has {len(prompt_ids)} tokens; with max_tokens="
                f"{params.max_tokens} that exceeds the model's context of {self.context} tokens",
                "messages",
            )
        return prompt_ids, params, constraint
