"""`spiral serve checkpoint=PATH`: an OpenAI-compatible chat endpoint over a local model.

Endpoints: POST /v1/chat/completions (model, messages, max_tokens or
max_completion_tokens, temperature, top_p, stop, n=1, seed) and GET /v1/models. Any
OpenAI client, `spiral eval opponents=api:NAME api_base_url=http://127.0.0.1:8000/v1`,
or another team's harness can play against a checkpoint this way.

Choices:
- `create_app(sampler, model_name, template)` takes any Sampler, so tests start the app
  over a tiny model and `main` over a checkpoint (resolved like `checkpoint:PATH`).
- Messages are rendered by the tokenizer's own chat template (`template=chat`, the
  default) or by a named template's chat markup (chatml, llama3, plain, ...), then
  encoded with `spiral.prompts.encode` (at most one BOS).
- Requests are served ONE AT A TIME behind a lock: the torch sampler holds one model and
  a KV cache; parallel requests would only fight for the same cores or GPU. Each
  request samples in a worker thread (`asyncio.to_thread`) that waits for the lock.
- finish_reason: the sampler's "eos" and "stop" -> "stop", "length" -> "length".
  `usage` counts prompt and completion tokens exactly (our own ids).
- temperature 0 is greedy (the sampler's convention). `n` other than 1, an empty
  message list or an unknown role is a 400 in OpenAI's error shape.
- The model name in a request is not checked (OpenAI clients insist on sending one); the
  reply names the served model.
- Binds 127.0.0.1 by default; pass host=0.0.0.0 deliberately to expose it.
- Limits, so one request cannot tie the server up: `max_tokens` above `max_tokens_limit`
  (default 4096) is a 400, and so is a prompt whose tokens plus `max_tokens` exceed the
  model's context (`max_position_embeddings`). Every generation is therefore bounded,
  and it is cancelled when its client disconnects: the handler polls the connection
  every DISCONNECT_POLL_S while a worker thread samples, and sets the sampler's cancel
  flag (`SamplingParams.cancel`), which stops it before the next token and frees the
  lock. On SIGTERM the server stops accepting; the request in flight gets
  FINISH_ON_SHUTDOWN_S to finish, then is cancelled the same way and answered 503 ("the
  server is shutting down"), and the process exits.
- Constrained replies: vLLM's structured-output extension for a fixed choice list
  (`guided_choice`, or `structured_outputs={"choice": [...]}`) restricts the reply to
  exactly one of the listed strings, the way training constrains answers to the legal
  moves (the sampler's AnswerConstraint: one choice's tokens, token by token). An outside
  harness can so keep a served checkpoint to legal moves. `guided_regex` is refused.
- `api_key_env=NAME`: requests must carry `Authorization: Bearer <value of $NAME>`
  (401 otherwise, in OpenAI's shape); without it the server is open (loopback only).
"""

# No `from __future__ import annotations` here: FastAPI reads the request model from the
# handler's annotation at runtime. fastapi and pydantic come with the `serve` extra.
import asyncio
import dataclasses
import hmac
import os
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any, Literal

import chz
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from spiral.args import (
    UsageError,
    device_name,
    help_text,
    parse_command,
    port_number,
    positive,
    wants_help,
)
from spiral.engines.base import Sampler, SamplingCancelled, SamplingParams
from spiral.engines.registry import known_engine
from spiral.prompts.render import encode, prefix_free
from spiral.prompts.spec import TemplateName
from spiral.prompts.templates import TEMPLATES
from spiral.types import AnswerConstraint, Completion

FINISH_REASON = {"eos": "stop", "stop": "stop", "length": "length"}
DEFAULT_MAX_TOKENS = 256
MAX_TOKENS_LIMIT = 4096
DISCONNECT_POLL_S = 0.1  # how often a running request checks its client is still there
GRACEFUL_SHUTDOWN_S = 2  # how long uvicorn waits for the request in flight after SIGTERM
FINISH_ON_SHUTDOWN_S = 1.0  # within that, how long the request may run before its 503


@chz.chz
class ServeArgs:
    """usage: spiral serve checkpoint=PATH [key=value ...]

    An OpenAI-compatible chat endpoint over a checkpoint; requests are answered one at a
    time."""

    checkpoint: str = chz.field(
        doc="run folder, checkpoint folder, model folder, 'base' or a hub id"
    )
    model_name: str = chz.field(
        default="", doc="base model for checkpoint=base (default embedded); the served name"
    )
    host: str = chz.field(default="127.0.0.1", doc="address to bind (0.0.0.0 exposes it)")
    port: int = chz.field(default=8000, doc="TCP port", validator=port_number)
    template: TemplateName = chz.field(
        default="chat", doc="chat (the tokenizer's chat template) or a named template's markup"
    )
    device: str = chz.field(default="auto", doc="auto | cpu | cuda | cuda:N", validator=device_name)
    engine: str = chz.field(
        default="torch",
        doc="the engine that samples (spiral.engines.registry)",
        validator=known_engine,
    )
    max_tokens_limit: int = chz.field(
        default=MAX_TOKENS_LIMIT,
        doc="the largest max_tokens a request may ask for",
        validator=positive,
    )
    api_key_env: str = chz.field(
        default="",
        doc="environment variable holding a bearer token requests must send (empty: open)",
    )


def render_messages(messages: Sequence[dict[str, str]], template: str, tokenizer: Any) -> str:
    """Prompt text for a chat: the tokenizer's chat template or a named template's markup."""
    from spiral.prompts.templates import _CHAT, get_template

    chat = get_template(template).chat
    return _CHAT[chat](list(messages), tokenizer)


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


def _error(
    status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"
) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param}}
    return JSONResponse(status_code=status, content=body)


class BearerAuth:
    """ASGI middleware: HTTP requests must carry `Authorization: Bearer <api_key>` (401 in
    OpenAI's shape otherwise). Plain ASGI, not Starlette's BaseHTTPMiddleware, whose
    wrapped `receive` hides a client's disconnect from the handler."""

    def __init__(self, app: Any, api_key: str) -> None:
        self.app, self.expected = app, f"Bearer {api_key}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            sent = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(sent, self.expected):
                reply = _error(401, "missing or wrong bearer token", kind="authentication_error")
                await reply(scope, receive, send)
                return
        await self.app(scope, receive, send)


def cancel_requested(params: SamplingParams) -> bool:
    return params.cancel is not None and params.cancel.is_set()


def model_context(sampler: Sampler) -> int | None:
    """The served model's context length in tokens, when its config says."""
    config = getattr(getattr(sampler, "model", None), "config", None)
    value = getattr(config, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None


def create_app(
    sampler: Sampler,
    model_name: str,
    template: str = "chat",
    max_tokens_limit: int = MAX_TOKENS_LIMIT,
    api_key: str | None = None,
) -> FastAPI:
    """The FastAPI app serving `sampler` under `model_name` (one request at a time)."""
    if template not in TEMPLATES:
        raise ValueError(f"unknown template {template!r}; valid: {', '.join(TEMPLATES)}")
    app = FastAPI(title="spiral serve", description=f"OpenAI-compatible chat over {model_name}")
    app.state.stopping = Stopping()
    lock = threading.Lock()
    created = int(time.time())
    context = model_context(sampler)

    if api_key is not None:
        app.add_middleware(BearerAuth, api_key=api_key)

    @app.exception_handler(RequestValidationError)
    def _validation(request: Any, exc: RequestValidationError) -> JSONResponse:
        return _error(400, f"invalid request: {exc.errors()}")

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        entry = {"id": model_name, "object": "model", "created": created, "owned_by": "spiral"}
        return {"object": "list", "data": [entry]}

    def generate(
        messages: list[dict[str, str]], params: SamplingParams, choices: list[str] | None = None
    ) -> Any:
        """Render, check the context, sample: one request at a time (the tokenizer and
        the model are shared). Runs in a worker thread; raises SamplingCancelled when
        `params.cancel` is set."""
        with lock:
            if cancel_requested(params):  # the client left while this one was queued
                raise SamplingCancelled("the client left before sampling began")
            try:
                text = render_messages(messages, template, sampler.tokenizer)
            except ValueError as err:
                return _error(400, str(err), "messages")
            prompt_ids = encode(text, sampler.tokenizer)
            constraint = None
            if choices is not None:
                try:
                    constraint = choice_constraint(choices, sampler.tokenizer)
                except ValueError as err:
                    return _error(400, str(err), "guided_choice")
                longest = max(len(c) for c in constraint.choices)
                if longest > max_tokens_limit:  # every limit holds after the extension
                    return _error(
                        400,
                        f"the longest guided_choice reply has {longest} tokens, above this "
                        f"server's limit of {max_tokens_limit} (spiral serve max_tokens_limit=...)",
                        "guided_choice",
                    )
                params = dataclasses.replace(params, max_tokens=max(params.max_tokens, longest))
            if context is not None and len(prompt_ids) + params.max_tokens > context:
                return _error(
                    400,
                    f"the prompt has {len(prompt_ids)} tokens; with max_tokens="
                    f"{params.max_tokens} that exceeds the model's context of {context} tokens",
                    "messages",
                )
            completion = sampler.sample([prompt_ids], params, [constraint])[0]
        for stop in params.stop:  # OpenAI replies end before the stop string
            if stop in completion.text:
                cut = completion.text[: completion.text.index(stop)]
                completion = dataclasses.replace(completion, text=cut)
        return chat_response(completion, len(prompt_ids), model_name)

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatRequest, request: Request) -> Any:
        if req.n != 1:
            return _error(400, f"only n=1 is supported, got n={req.n}", "n")
        messages = [{"role": m.role, "content": _text(m.content)} for m in req.messages]
        if req.guided_regex is not None:
            return _error(
                400,
                "guided_regex is not supported by spiral serve; list the answers with "
                "guided_choice (or structured_outputs={'choice': [...]}) instead",
                "guided_regex",
            )
        try:
            choices = req.choices()
        except ValueError as err:
            return _error(400, str(err), "structured_outputs")
        broken = _broken_text([m["content"] for m in messages] + list(choices or []))
        if broken is not None:
            return _error(400, f"invalid Unicode in the request: {broken}", "messages")
        cancel = threading.Event()
        params = dataclasses.replace(req.sampling_params(), cancel=cancel)
        if params.max_tokens > max_tokens_limit:
            return _error(
                400,
                f"max_tokens={params.max_tokens} is above this server's limit of "
                f"{max_tokens_limit} (spiral serve max_tokens_limit=...)",
                "max_tokens",
            )
        work = asyncio.ensure_future(asyncio.to_thread(generate, messages, params, choices))
        try:
            # Watch the client and the server while the worker samples: a disconnect, or
            # a shutdown past its grace, cancels the work (the sampler stops before its
            # next token and the lock is free again).
            while not work.done():
                await asyncio.wait({work}, timeout=DISCONNECT_POLL_S)
                if work.done():
                    break
                if app.state.stopping.overdue() or await request.is_disconnected():
                    cancel.set()
            return await work
        except SamplingCancelled:
            if app.state.stopping.since is not None:
                return _error(503, "the server is shutting down", kind="server_error")
            return _error(499, "the client closed the request; generation was cancelled")
        except asyncio.CancelledError:  # cancelled by uvicorn itself: answer if we still can
            cancel.set()  # the worker stops at its next token; give it a moment to
            await asyncio.wait({work}, timeout=GRACEFUL_SHUTDOWN_S)
            return _error(503, "the server is shutting down", kind="server_error")

    return app


class Stopping:
    """When the server was told to stop (SIGTERM / Ctrl-C), for the request in flight."""

    def __init__(self) -> None:
        self.since: float | None = None

    def begin(self) -> None:
        if self.since is None:
            self.since = time.monotonic()

    def overdue(self) -> bool:
        return self.since is not None and time.monotonic() - self.since > FINISH_ON_SHUTDOWN_S


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


def _text(content: str | list[dict[str, Any]]) -> str:
    """Message content as text: a string, or the text parts of a content-part list."""
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content if part.get("type") == "text")


def run_server(app: FastAPI, host: str, port: int) -> None:
    """Serve until SIGTERM / Ctrl-C: uvicorn then stops accepting; the request in flight
    sees `app.state.stopping`, finishes or is cancelled after FINISH_ON_SHUTDOWN_S and
    answered 503, and the process exits."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            app.state.stopping.begin()
            super().handle_exit(sig, frame)

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    Server(config).run()


def parse_args(args: Sequence[str]) -> ServeArgs:
    return parse_command(ServeArgs, args, "serve")


def main(args: list[str]) -> int:
    """`spiral serve checkpoint=PATH [host=127.0.0.1] [port=8000] [template=chat]`."""
    if wants_help(args):
        print(help_text(ServeArgs, "serve"))
        return 0
    values = parse_args(args)
    api_key = None
    if values.api_key_env:
        api_key = os.environ.get(values.api_key_env, "")
        if not api_key:
            raise UsageError(f"api_key_env={values.api_key_env}: that variable is empty or unset")
    from spiral.agents.model_agent import load_sampler, resolve_source

    source = resolve_source(values.checkpoint, values.model_name)
    sampler = load_sampler(source, device=values.device, engine=values.engine)
    name = values.model_name or source.name
    app = create_app(sampler, name, values.template, values.max_tokens_limit, api_key)
    host, port = values.host, values.port
    print(f"serving {source.name} as {name!r} on http://{host}:{port}/v1 (one request at a time)")
    run_server(app, host, port)
    return 0
