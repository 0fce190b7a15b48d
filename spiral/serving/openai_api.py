"""The OpenAI chat-completions schema as `spiral serve` speaks it: the request fields it
honours, the refusals it answers in OpenAI's error shape, and the reply body."""

# No `from __future__ import annotations` here: FastAPI reads the request model from the
# handler's annotation at runtime.
import dataclasses
import time
import uuid
from collections.abc import Sequence
from typing import Any, Literal

from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from spiral.engines.base import SamplingParams
from spiral.prompts.render import prefix_free
from spiral.types import AnswerConstraint, Completion

FINISH_REASON = {"eos": "stop", "stop": "stop", "length": "length"}
DEFAULT_MAX_TOKENS = 256


class Message(BaseModel):
    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]]


class ChatRequest(BaseModel):
    """The OpenAI chat-completions fields we honour; others are ignored."""

    model: str = ""
    messages: list[Message] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    n: int = 1
    seed: int | None = None
    # vLLM's structured-output extensions for a fixed list of answers (sent with the
    # openai client's `extra_body`): `guided_choice` (vLLM < 0.10) or
    # `structured_outputs={"choice": [...]}` (later); the reply is exactly one of them.
    guided_choice: list[str] | None = None
    structured_outputs: dict[str, Any] | None = None
    guided_regex: str | None = None  # refused with a clear message (not supported)

    def choices(self) -> list[str] | None:
        """The allowed replies, from whichever extension the client used."""
        if self.guided_choice is not None:
            return self.guided_choice
        if self.structured_outputs is not None:
            unknown = set(self.structured_outputs) - {"choice"}
            if unknown:
                raise ValueError(
                    f"structured_outputs supports only 'choice' here, not {sorted(unknown)}"
                )
            found = self.structured_outputs.get("choice")
            if not isinstance(found, list) or not all(isinstance(c, str) for c in found):
                raise ValueError("structured_outputs.choice must be a list of strings")
            return found
        return None

    def sampling_params(self) -> SamplingParams:
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        return SamplingParams(
            max_tokens=self.max_completion_tokens or self.max_tokens or DEFAULT_MAX_TOKENS,
            temperature=self.temperature,
            top_p=self.top_p,
            stop=stop,
            seed=self.seed,
        )


def chat_response(completion: Completion, prompt_tokens: int, model_name: str) -> dict[str, Any]:
    """The OpenAI response body for one completion (text cut before any stop string)."""
    n_out = len(completion.tokens)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_name,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": completion.text},
                "finish_reason": FINISH_REASON[completion.stop_reason],
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": n_out,
            "total_tokens": prompt_tokens + n_out,
        },
    }


def error_reply(
    status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"
) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param}}
    return JSONResponse(status_code=status, content=body)


def cancel_requested(params: SamplingParams) -> bool:
    return params.cancel is not None and params.cancel.is_set()


def refusal(req: ChatRequest, max_tokens_limit: int) -> JSONResponse | None:
    """The 400 for what a request asks that this server does not do, or None."""
    if req.n != 1:
        return error_reply(400, f"only n=1 is supported, got n={req.n}", "n")
    if req.guided_regex is not None:
        return error_reply(
            400,
            "guided_regex is not supported by spiral serve; list the answers with "
            "guided_choice (or structured_outputs={'choice': [...]}) instead",
            "guided_regex",
        )
    try:
        choices = req.choices()
    except ValueError as err:
        return error_reply(400, str(err), "structured_outputs")
    texts = [message_text(m.content) for m in req.messages] + list(choices or [])
    broken = _broken_text(texts)
    if broken is not None:
        return error_reply(400, f"invalid Unicode in the request: {broken}", "messages")
    params = req.sampling_params()
    if choices is not None and params.stop:
        return error_reply(
            400,
            "stop cannot be used with guided_choice: a reply cut at a stop string would not "
            "be one of the listed choices; drop stop",
            "stop",
        )
    stop_problem = _stop_problem(params.stop)
    if stop_problem is not None:
        return error_reply(400, stop_problem, "stop")
    max_tokens = params.max_tokens
    if max_tokens > max_tokens_limit:
        return error_reply(
            400,
            f"max_tokens={max_tokens} is above this server's limit of "
            f"{max_tokens_limit} (spiral serve max_tokens_limit=...)",
            "max_tokens",
        )
    return None


MAX_STOPS = 16  # stop strings in one request (OpenAI takes 4)
MAX_STOP_CHARS = 256  # the longest stop string


def _stop_problem(stops: Sequence[str]) -> str | None:
    """Why the stop strings cannot be used (an empty one would end every reply at its
    first token; each is looked for after every token), or None."""
    if len(stops) > MAX_STOPS:
        return f"stop lists {len(stops)} strings; at most {MAX_STOPS} are taken"
    if any(s == "" for s in stops):
        return "stop contains an empty string, which would end every reply at once; drop it"
    longest = max((len(s) for s in stops), default=0)
    if longest > MAX_STOP_CHARS:
        return f"a stop string has {longest} characters; at most {MAX_STOP_CHARS} are taken"
    return None


def _broken_text(texts: Sequence[str]) -> str | None:
    """What is wrong with the first text that is not valid Unicode (a lone surrogate such
    as "\\ud800", which JSON allows and UTF-8 cannot encode), or None."""
    for text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            return f"{err.reason} at character {err.start} ({text[err.start]!r})"
    return None


def choice_constraint(choices: Sequence[str], tokenizer: Any) -> AnswerConstraint:
    """The answer restriction for a fixed list of replies: each choice's own tokens (as
    the tokenizer encodes it alone), made prefix-free with the eos token where one
    choice's tokens begin another's; the sampler then draws exactly one choice."""
    if not choices:
        raise ValueError("guided_choice is empty; give at least one allowed reply")
    if len(set(choices)) != len(choices):
        raise ValueError("guided_choice lists a reply twice")
    raw = [tuple(tokenizer.encode(c, add_special_tokens=False)) for c in choices]
    return AnswerConstraint(choices=prefix_free(raw, tokenizer.eos_token_id, choices))


def message_text(content: str | list[dict[str, Any]]) -> str:
    """Message content as text: a string, or the text parts of a content-part list."""
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content if part.get("type") == "text")


def finished_reply(
    completion: Completion, params: SamplingParams, prompt_tokens: int, model_name: str
) -> dict[str, Any]:
    """The reply body for a finished completion, its text cut before any stop string."""
    for stop in params.stop:  # OpenAI replies end before the stop string
        if stop in completion.text:
            cut = completion.text[: completion.text.index(stop)]
            completion = dataclasses.replace(completion, text=cut)
    return chat_response(completion, prompt_tokens, model_name)
