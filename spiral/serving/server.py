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
- One thread samples. Over the torch engine every request joins one running batch
  between two decode steps and leaves it when done (continuous.py), so a short request
  waits for a step of the others, not for their replies; over other samplers requests
  that arrive together and ask for the same sampling parameters share one sampler call
  (batcher.py, where a seeded request is sampled alone). A seeded request's reply is
  the one the sampler draws for it alone.
  Rendering, tokenising and every check run in the request's own worker thread, before
  it joins the queue, so a huge prompt never holds up the model.
- finish_reason: the sampler's "eos" and "stop" -> "stop", "length" -> "length".
  `usage` counts prompt and completion tokens exactly (our own ids).
- temperature 0 is greedy (the sampler's convention). `n` other than 1, an empty
  message list or an unknown role is a 400 in OpenAI's error shape.
- The model name in a request is not checked (OpenAI clients insist on sending one); the
  reply names the served model.
- Binds 127.0.0.1 by default; pass host=0.0.0.0 deliberately to expose it.
- Limits, so one request cannot tie the server up (limits.py): a body over
  `max_request_mb` (default 1) is a 413 before it is read; a prompt whose length alone
  shows it cannot fit is a 400 before it is tokenised; `max_tokens` above
  `max_tokens_limit` (default 4096) is a 400, and so is a prompt whose tokens plus
  `max_tokens` exceed the model's context (`max_position_embeddings`). A request that
  takes longer than `request_timeout_s` (default 300, queued and sampled) is a 408. A
  request is cancelled when its client disconnects: the handler polls the connection
  every DISCONNECT_POLL_S, and its row leaves the running batch before the next token
  (over other samplers the cancel flag, `SamplingParams.cancel`, stops the call before
  its next token once every request sharing it is cancelled). On SIGTERM
  the server stops accepting; the requests in flight get FINISH_ON_SHUTDOWN_S to finish,
  then are cancelled the same way and answered 503 ("the server is shutting down"), and
  the process exits.
- Constrained replies: vLLM's structured-output extension for a fixed choice list
  (`guided_choice`, or `structured_outputs={"choice": [...]}`) restricts the reply to
  exactly one of the listed strings, the way training constrains answers to the legal
  moves (the sampler's AnswerConstraint: one choice's tokens, token by token). An outside
  harness can so keep a served checkpoint to legal moves. The reply is always one whole
  choice: `max_tokens` is raised to the longest choice's tokens (within
  `max_tokens_limit`), and `stop` with `guided_choice` is a 400. `guided_regex` is
  refused.
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
import socket
import threading
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import chz
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
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
from spiral.prompts.spec import TemplateName
from spiral.prompts.templates import TEMPLATES
from spiral.serving.continuous import make_batcher
from spiral.serving.intake import Intake
from spiral.serving.limits import MAX_BODY_MB, BodyLimit
from spiral.serving.openai_api import (
    ChatRequest,
    error_reply,
    finished_reply,
    message_text,
    refusal,
)

MAX_TOKENS_LIMIT = 4096
DISCONNECT_POLL_S = 0.1  # how often a running request checks its client is still there
GRACEFUL_SHUTDOWN_S = 2  # how long uvicorn waits for the request in flight after SIGTERM
FINISH_ON_SHUTDOWN_S = 1.0  # within that, how long the request may run before its 503
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
        return error_reply(400, f"invalid request: {exc.errors()}")

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
        began = time.monotonic()
        refused = refusal(req, max_tokens_limit)
        if refused is not None:
            return refused
        messages = [{"role": m.role, "content": message_text(m.content)} for m in req.messages]
        cancel = threading.Event()
        params = dataclasses.replace(req.sampling_params(), cancel=cancel)
        prepared = await asyncio.to_thread(intake.prepare, messages, params, req.choices())
        if isinstance(prepared, JSONResponse):
            return prepared
        prompt_ids, params, constraint = prepared
        work = asyncio.wrap_future(batcher.submit(prompt_ids, params, constraint))
        try:
            # Watch the client, the clock and the server while the request waits and is
            # sampled: a disconnect, the time limit, or a shutdown past its grace cancels
            # it (dropped if still queued; otherwise its rows stop at the next token once
            # every request sharing the call is cancelled).
            while not work.done():
                await asyncio.wait({work}, timeout=DISCONNECT_POLL_S)
                if work.done():
                    break
                if time.monotonic() - began > request_timeout_s:
                    cancel.set()
                    work.add_done_callback(_retrieved)  # its outcome no longer matters
                    return error_reply(
                        408,
                        f"the request took longer than this server's limit of "
                        f"{request_timeout_s:g} s (spiral serve request_timeout_s=...)",
                    )
                if app.state.stopping.overdue() or await request.is_disconnected():
                    cancel.set()
            return finished_reply(await work, params, len(prompt_ids), model_name)
        except SamplingCancelled:
            if app.state.stopping.since is not None:
                return error_reply(503, "the server is shutting down", kind="server_error")
            return error_reply(499, "the client closed the request; generation was cancelled")
        except asyncio.CancelledError:  # cancelled by uvicorn itself: answer if we still can
            cancel.set()  # the request's rows stop at their next token; give them a moment
            await asyncio.wait({work}, timeout=GRACEFUL_SHUTDOWN_S)
            return error_reply(503, "the server is shutting down", kind="server_error")

    return app


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Read a dropped request's outcome, so that asyncio does not log it as unread."""
    if not future.cancelled():
        future.exception()


class Stopping:
    """When the server was told to stop (SIGTERM / Ctrl-C), for the request in flight."""

    def __init__(self) -> None:
        self.since: float | None = None

    def begin(self) -> None:
        if self.since is None:
            self.since = time.monotonic()

    def overdue(self) -> bool:
        return self.since is not None and time.monotonic() - self.since > FINISH_ON_SHUTDOWN_S


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


def refuse_unusable_address(host: str, port: int) -> None:
    """One line where the server could not listen on host:port (the port in use, a host
    this machine does not have), said before the model loads and the server starts."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as err:
        reason = err.strerror or str(err)
        raise UsageError(
            f"cannot listen on {host}:{port} ({reason}); pass another port=... or a host= "
            "of this machine (127.0.0.1, 0.0.0.0)"
        ) from None


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

    refuse_unusable_address(values.host, values.port)  # before the model loads
    source = resolve_source(values.checkpoint, values.model_name)
    sampler = load_sampler(source, device=values.device, engine=values.engine)
    name = values.model_name or source.name
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
