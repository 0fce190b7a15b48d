"""`spiral serve checkpoint=PATH`: an OpenAI-compatible chat endpoint over a local model.

Endpoints: POST /v1/chat/completions and GET /v1/models. Any OpenAI client (`stream=True`
included), `spiral eval opponents=api:NAME api_base_url=http://127.0.0.1:8000/v1`, or
another team's harness can play against a checkpoint this way.

Fields honoured: model (not checked; the reply names the served model), messages (roles
system, user, assistant, developer, tool; content a string or text parts; `name` and
`tool_call_id` read and ignored), max_tokens or max_completion_tokens (default 256, or
`max_tokens_limit` where lower), temperature, top_p, stop, n=1, seed, stream,
stream_options.include_usage, and vLLM's `guided_choice` / `structured_outputs.choice`.
Accepted and ignored, since they change nothing here: user, metadata, store,
service_tier, parallel_tool_calls, prompt_cache_key, safety_identifier, and the fields
below at their "off" values (logprobs=false, presence_penalty=0, tools=[],
response_format={"type": "text"}, tool_choice="none", ...).

Refused with a 400 in OpenAI's error shape whose `param` names the field and whose
message says what to do (fields.py), never dropped: logprobs, top_logprobs,
response_format other than text, tools / tool_choice / functions / function_call,
presence_penalty, frequency_penalty, logit_bias, modalities other than text, audio,
prediction, reasoning_effort, verbosity, web_search_options; vLLM's top_k, min_p,
repetition_penalty, min_tokens, best_of, use_beam_search, ignore_eos, echo,
include_stop_str_in_output, guided_json, guided_grammar, guided_regex; a message
holding tool calls, or a content part that is not text (an image, audio, a file);
`stream_options` without `stream`; `n` other than 1; an empty message list or an unknown
role; and any field this server does not know (as OpenAI refuses one, so a misspelt
`temperture` is not silently ignored). A value of the wrong type is a 400 naming its
field (`messages[0].role`).

Choices:
- `create_app(sampler, model_name, template)` takes any Sampler, so tests start the app
  over a tiny model and `main` over a checkpoint (resolved like `checkpoint:PATH`).
- Messages are rendered by the tokenizer's own chat template (`template=chat`, the
  default) or by a named template's chat markup (chatml, llama3, plain, ...), then
  encoded with `spiral.prompts.encode` (at most one BOS).
- One thread samples. Over the torch engine every request joins one running batch
  between two decode steps and leaves it when done (continuous.py): a short request
  (at most 32 tokens) joins at the next step even when long replies fill the batch, so it
  waits for a step of the others, not for their replies. Over other samplers requests
  that arrive together and ask for the same sampling parameters share one sampler call
  (batcher.py, where a seeded request is sampled alone). A seeded request's reply is
  the one the sampler draws for it alone.
  Rendering, tokenising and every check run in the request's own worker thread, before
  it joins the queue, so a huge prompt never holds up the model.
- Streaming (`stream: true`, streaming.py): server-sent events as OpenAI sends them:
  `data: {chat.completion.chunk}` lines, the first delta with role "assistant", the text
  as the model decodes it (over the torch engine token by token; over other samplers
  a slice at a time where replies are drawn in slices, else whole when done), never a stop string or a partial character, a last chunk with the
  finish_reason, with `stream_options={"include_usage": true}` a chunk with the usage,
  then `data: [DONE]`. A `guided_choice` reply comes whole in one delta. A refusal
  before sampling is an ordinary 4xx; what ends a stream once begun (the time limit, a
  shutdown, a model failure) is an error event in OpenAI's shape, then `[DONE]`.
- finish_reason: the sampler's "eos" and "stop" -> "stop", "length" -> "length".
  `usage` counts prompt and completion tokens exactly (our own ids).
- temperature 0 is greedy (the sampler's convention).
- Binds 127.0.0.1 by default; pass host=0.0.0.0 deliberately to expose it.
- Start-up, each refusal one line before the server listens (startup.py): a checkpoint
  that does not exist, an address it cannot listen on (before the model loads), and
  weights that hold NaN or inf (the parameter checked, then one token drawn from a short
  prompt, whose NaN logits are refused too); such a model would answer every request
  with a 500.
- Limits, so one request cannot tie the server up (limits.py): a body over
  `max_request_mb` (default 1) is a 413 before it is read; a prompt whose length alone
  shows it cannot fit is a 400 before it is tokenised; `max_tokens` above
  `max_tokens_limit` (default 4096) is a 400, and so is a prompt whose tokens plus
  `max_tokens` exceed the model's context (`max_position_embeddings`). A request that
  takes longer than `request_timeout_s` (default 300, queued and sampled) is a 408. A
  request is cancelled when its client disconnects (flight.py): the handler polls the
  connection every DISCONNECT_POLL_S (a stream: its client's leaving ends it), and its
  row leaves the running batch before the next token (over other samplers the cancel
  flag, `SamplingParams.cancel`, stops the call before its next token once every request
  sharing it is cancelled).
- Signals (shutdown.py): on SIGTERM, SIGHUP (the terminal or ssh session closing; left
  alone when it is ignored, as under nohup) or SIGINT (Ctrl-C) the server stops
  accepting; the requests in flight get FINISH_ON_SHUTDOWN_S (1 s) to finish, then are
  cancelled the same way and answered 503 ("the server is shutting down"; a stream: that
  error event), and the process exits.
- Constrained replies: vLLM's structured-output extension for a fixed choice list
  (`guided_choice`, or `structured_outputs={"choice": [...]}`) restricts the reply to
  exactly one of the listed strings, the way training constrains answers to the legal
  moves (the sampler's AnswerConstraint: one choice's tokens, token by token). An outside
  harness can so keep a served checkpoint to legal moves. The reply is always one whole
  choice, exactly as listed: each choice is encoded as plain text (text spelled like a
  special token, "<|im_end|>", is its characters, not the special token), and the reply
  is the listed string whose tokens were drawn. An empty choice, a choice listed twice
  or two that encode to the same tokens is a 400 naming them. `max_tokens` is the
  longest choice's tokens, whatever was asked (within `max_tokens_limit`; a list of moves
  so makes a short request, which joins a full batch), and `stop` with `guided_choice`
  is a 400. `guided_regex` is refused.
- `api_key_env=NAME`: requests must carry `Authorization: Bearer <value of $NAME>`
  (401 otherwise, in OpenAI's shape); without it the server is open (loopback only).
"""

# No `from __future__ import annotations` here: FastAPI reads the request model from the
# handler's annotation at runtime. fastapi and pydantic come with the `serve` extra.
import asyncio
import contextlib
import dataclasses
import hmac
import os
import threading
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import chz
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from spiral.args import (
    UsageError,
    device_name,
    help_text,
    parse_command,
    port_number,
    positive,
    wants_help,
)
from spiral.engines.base import Sampler, SamplingCancelled
from spiral.engines.registry import known_engine
from spiral.errors import SpiralError
from spiral.prompts.spec import TemplateName
from spiral.prompts.templates import TEMPLATES
from spiral.serving.continuous import make_batcher
from spiral.serving.flight import Flight, Stopping
from spiral.serving.intake import Intake
from spiral.serving.limits import MAX_BODY_MB, BodyLimit
from spiral.serving.openai_api import (
    ChatRequest,
    error_reply,
    finished_reply,
    invalid_field,
    message_text,
    refusal,
)
from spiral.serving.shutdown import GRACEFUL_SHUTDOWN_S, run_server
from spiral.serving.startup import refuse_broken_model, refuse_unusable_address
from spiral.serving.streaming import Chunks, stream_reply

MAX_TOKENS_LIMIT = 4096
REQUEST_TIMEOUT_S = 300.0  # default time limit of one request, queued and sampled


@chz.chz
class ServeArgs:
    """usage: spiral serve checkpoint=PATH [key=value ...]

    An OpenAI-compatible chat endpoint over a checkpoint; requests that arrive together
    are sampled together."""

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
    max_request_mb: float = chz.field(
        default=MAX_BODY_MB,
        doc="the largest request body in MiB; larger ones are refused (413) before they are parsed",
        validator=positive,
    )
    request_timeout_s: float = chz.field(
        default=REQUEST_TIMEOUT_S,
        doc="seconds a request may take, queued and sampled, before its 408",
        validator=positive,
    )


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
                reply = error_reply(
                    401, "missing or wrong bearer token", kind="authentication_error"
                )
                await reply(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(
    sampler: Sampler,
    model_name: str,
    template: str = "chat",
    max_tokens_limit: int = MAX_TOKENS_LIMIT,
    api_key: str | None = None,
    max_request_mb: float = MAX_BODY_MB,
    request_timeout_s: float = REQUEST_TIMEOUT_S,
) -> FastAPI:
    """The FastAPI app serving `sampler` under `model_name`; requests that arrive together
    are sampled together (continuous.py, batcher.py)."""
    if template not in TEMPLATES:
        raise ValueError(f"unknown template {template!r}; valid: {', '.join(TEMPLATES)}")
    batcher = make_batcher(sampler)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        batcher.close()

    app = FastAPI(
        title="spiral serve",
        description=f"OpenAI-compatible chat over {model_name}",
        lifespan=lifespan,
    )
    app.state.stopping = Stopping()
    app.state.batcher = batcher
    intake = Intake(sampler, template, max_tokens_limit)
    created = int(time.time())

    app.add_middleware(BodyLimit, max_bytes=int(max_request_mb * 2**20))
    if api_key is not None:  # added last, so it runs first: no body is read unauthorised
        app.add_middleware(BearerAuth, api_key=api_key)

    @app.exception_handler(RequestValidationError)
    def _validation(request: Any, exc: RequestValidationError) -> JSONResponse:
        return invalid_field(exc.errors())

    @app.exception_handler(StarletteHTTPException)
    def _http(request: Any, exc: StarletteHTTPException) -> JSONResponse:
        # FastAPI's own refusals (a body that is not JSON, an unknown path, a wrong
        # method) in OpenAI's error shape, like every other answer of this server
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return error_reply(exc.status_code, str(exc.detail), kind=kind)

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        entry = {"id": model_name, "object": "model", "created": created, "owned_by": "spiral"}
        return {"object": "list", "data": [entry]}

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatRequest, request: Request) -> Any:
        deadline = time.monotonic() + request_timeout_s
        refused = refusal(req, max_tokens_limit)
        if refused is not None:
            return refused
        messages = [{"role": m.role, "content": message_text(m.content)} for m in req.messages]
        params = req.sampling_params(max_tokens_limit)
        params = dataclasses.replace(params, cancel=threading.Event())
        choices = req.choices()
        prepared = await asyncio.to_thread(
            intake.prepare, messages, params, choices, req.choice_field()
        )
        if isinstance(prepared, JSONResponse):
            return prepared
        stream = bool(req.stream) and prepared[2] is None  # a choice comes whole
        flight = Flight(app.state.batcher, prepared, app.state.stopping, deadline, stream)
        if req.stream:
            chunks = Chunks(model_name, req.include_usage())
            events = stream_reply(flight, chunks, decode, choices, request_timeout_s)
            return StreamingResponse(events, media_type="text/event-stream")
        return await whole_reply(flight, request, model_name, choices, request_timeout_s)

    def decode(tokens: Sequence[int]) -> str:
        return str(sampler.tokenizer.decode(list(tokens), skip_special_tokens=True))

    return app


async def whole_reply(
    flight: Flight, request: Request, model_name: str, choices: Any, timeout_s: float
) -> Any:
    """The reply of an unstreamed request, or the error that ends it. The client, the
    clock and the server are watched while the request waits and is sampled: a
    disconnect, the time limit, or a shutdown past its grace cancels it (dropped if
    still queued; otherwise its row stops at the next token)."""
    try:
        while not flight.work.done():
            if not await flight.watch(request):
                return error_reply(
                    408,
                    f"the request took longer than this server's limit of {timeout_s:g} s "
                    "(spiral serve request_timeout_s=...)",
                )
        completion = await flight.work
        return finished_reply(
            completion, flight.params, flight.prompt_tokens, model_name,
            flight.constraint, choices,
        )  # fmt: skip
    except SamplingCancelled:
        if flight.stopping.since is not None:
            return error_reply(503, "the server is shutting down", kind="server_error")
        return error_reply(499, "the client closed the request; generation was cancelled")
    except SpiralError as err:  # the model failed on this request (e.g. NaN logits)
        return error_reply(500, str(err), kind="server_error")
    except asyncio.CancelledError:  # cancelled by uvicorn itself: answer if we still can
        flight.cancel.set()  # the request's row stops at its next token; give it a moment
        await asyncio.wait({flight.work}, timeout=GRACEFUL_SHUTDOWN_S)
        return error_reply(503, "the server is shutting down", kind="server_error")


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

    source = resolve_source(values.checkpoint, values.model_name)  # loads nothing yet
    refuse_unusable_address(values.host, values.port)  # before the model loads
    sampler = load_sampler(source, device=values.device, engine=values.engine)
    name = values.model_name or source.name
    refuse_broken_model(sampler, source.name)  # NaN weights: one line, not a 500 a request
    app = create_app(
        sampler,
        name,
        values.template,
        values.max_tokens_limit,
        api_key,
        values.max_request_mb,
        values.request_timeout_s,
    )
    host, port = values.host, values.port
    print(f"serving {source.name} as {name!r} on http://{host}:{port}/v1")
    run_server(app, host, port)
    return 0
