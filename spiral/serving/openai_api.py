"""The OpenAI chat-completions schema as `spiral serve` speaks it: the request fields it
honours, the refusals it answers in OpenAI's error shape (fields.py: the fields it does
not offer), and the reply body."""

# No `from __future__ import annotations` here: FastAPI reads the request model from the
# handler's annotation at runtime.
import dataclasses
import time
import uuid
from collections.abc import Sequence
from typing import Any, Literal

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from spiral.engines.base import SamplingParams
from spiral.prompts.render import prefix_free
from spiral.serving.fields import field_problem, message_problem
from spiral.types import AnswerConstraint, Completion

FINISH_REASON = {"eos": "stop", "stop": "stop", "length": "length"}
DEFAULT_MAX_TOKENS = 256


class Message(BaseModel):
    """One chat message; fields beyond role and content are judged by fields.py."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(BaseModel):
    """The OpenAI chat-completions fields we honour; the others are kept (`model_extra`)
    for fields.py to accept or refuse."""

    model_config = ConfigDict(extra="allow")

    model: str = ""
    messages: list[Message] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    n: int = 1
    seed: int | None = None
    stream: bool | None = None
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

    def choice_field(self) -> str:
        """The field the choices came in, for the messages that name it."""
        return "guided_choice" if self.guided_choice is not None else "structured_outputs"

    def length_field(self) -> str:
        return "max_completion_tokens" if self.max_completion_tokens else "max_tokens"

    def include_usage(self) -> bool:
        options = (self.model_extra or {}).get("stream_options") or {}
        return bool(options.get("include_usage", False))

    def sampling_params(self, max_tokens_limit: int = DEFAULT_MAX_TOKENS) -> SamplingParams:
        """The sampler's parameters; a request that names no length gets
        DEFAULT_MAX_TOKENS, or the server's limit where that is lower."""
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        default = min(DEFAULT_MAX_TOKENS, max_tokens_limit)
        return SamplingParams(
            max_tokens=self.max_completion_tokens or self.max_tokens or default,
            temperature=self.temperature,
            top_p=self.top_p,
            stop=stop,
            seed=self.seed,
        )


def usage(completion: Completion, prompt_tokens: int) -> dict[str, int]:
    n_out = len(completion.tokens)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": n_out,
        "total_tokens": prompt_tokens + n_out,
    }


def chat_response(completion: Completion, prompt_tokens: int, model_name: str) -> dict[str, Any]:
    """The OpenAI response body for one completion (its text as the client gets it)."""
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
        "usage": usage(completion, prompt_tokens),
    }


def error_reply(
    status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"
) -> JSONResponse:
    return JSONResponse(status_code=status, content=error_body(message, param, kind))


def error_body(
    message: str, param: str | None = None, kind: str = "invalid_request_error"
) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param}}


def invalid_field(errors: Sequence[Any]) -> JSONResponse:
    """The 400 for a body the request model does not take, naming the first field at
    fault (`messages[0].role`) and what was wrong with it."""
    first = dict(errors[0]) if errors else {}
    loc = [part for part in first.get("loc", ()) if part != "body"]
    field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    if not field:
        return error_reply(400, f"invalid request: {first.get('msg', 'not a JSON object')}")
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    message = f"invalid {field}: {first.get('msg', 'not valid')}{more}"
    return error_reply(400, message, field)


def refusal(req: ChatRequest, max_tokens_limit: int) -> JSONResponse | None:
    """The 400 for what a request asks that this server does not do, or None."""
    unoffered = _unoffered(req)
    if unoffered is not None:
        return error_reply(400, unoffered[1], unoffered[0])
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
    broken = _broken_text([message_text(m.content) for m in req.messages])
    if broken is not None:
        return error_reply(400, f"invalid Unicode in the request: {broken}", "messages")
    broken = _broken_text(choices or [])
    if broken is not None:
        return error_reply(400, f"invalid Unicode in a choice: {broken}", req.choice_field())
    params = req.sampling_params(max_tokens_limit)
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
    if params.max_tokens > max_tokens_limit:
        field = req.length_field()
        return error_reply(
            400,
            f"{field}={params.max_tokens} is above this server's limit of "
            f"{max_tokens_limit} (spiral serve max_tokens_limit=...)",
            field,
        )
    return None


def _unoffered(req: ChatRequest) -> tuple[str, str] | None:
    """(field, message) for the first field or message part this server does not offer."""
    problem = field_problem(dict(req.model_extra or {}), bool(req.stream))
    for index, message in enumerate(req.messages):
        if problem is not None:
            break
        fields = {"role": message.role, "content": message.content, **(message.model_extra or {})}
        problem = message_problem(index, fields)
    return problem


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


def choice_tokens(choice: str, tokenizer: Any) -> tuple[int, ...]:
    """A choice's tokens as plain text: text spelled like a special token ("<|im_end|>")
    is encoded as its characters, never as the special token, which the reply's text
    would drop."""
    return tuple(tokenizer.encode(choice, add_special_tokens=False, split_special_tokens=True))


def choice_constraint(choices: Sequence[str], tokenizer: Any) -> AnswerConstraint:
    """The answer restriction for a fixed list of replies: each choice's own tokens (as
    the tokenizer encodes it alone, as plain text), made prefix-free with the eos token
    where one choice's tokens begin another's; the sampler then draws exactly one
    choice. A ValueError names a choice that cannot be told apart or produced."""
    if not choices:
        raise ValueError("guided_choice is empty; give at least one allowed reply")
    seen: dict[tuple[int, ...], str] = {}
    for choice in choices:
        tokens = choice_tokens(choice, tokenizer)
        if not tokens:
            raise ValueError(f"the choice {choice!r} has no text, so no reply can be it; drop it")
        if tokens in seen and seen[tokens] == choice:
            raise ValueError(f"guided_choice lists the reply {choice!r} twice; drop one")
        if tokens in seen:
            raise ValueError(
                f"guided_choice has replies {seen[tokens]!r} and {choice!r} that encode to "
                "the same tokens, so a reply could not say which was meant; drop one"
            )
        seen[tokens] = choice
    return AnswerConstraint(choices=prefix_free(list(seen), tokenizer.eos_token_id, choices))


def chosen(completion: Completion, constraint: AnswerConstraint, choices: Sequence[str]) -> str:
    """The listed choice a constrained reply drew, as the client wrote it (its tokens'
    decoding may differ: special-token spellings, normalised text)."""
    drawn = tuple(completion.tokens)
    for tokens, choice in zip(constraint.choices, choices, strict=True):
        if drawn == tokens:
            return choice
    return completion.text


def message_text(content: str | list[dict[str, Any]] | None) -> str:
    """Message content as text: a string, or the text parts of a content-part list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content if part.get("type") == "text")


def reply_text(
    completion: Completion,
    params: SamplingParams,
    constraint: AnswerConstraint | None = None,
    choices: Sequence[str] | None = None,
) -> str:
    """A finished reply's text as the client gets it: a constrained reply's listed
    choice, else the text cut before the earliest stop string (OpenAI's replies end
    before it)."""
    if constraint is not None and choices is not None:
        return chosen(completion, constraint, choices)
    text = completion.text
    for stop in params.stop:
        if stop in text:
            text = text[: text.index(stop)]
    return text


def finished_reply(
    completion: Completion,
    params: SamplingParams,
    prompt_tokens: int,
    model_name: str,
    constraint: AnswerConstraint | None = None,
    choices: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The reply body for a finished completion (`reply_text`)."""
    text = reply_text(completion, params, constraint, choices)
    return chat_response(dataclasses.replace(completion, text=text), prompt_tokens, model_name)
