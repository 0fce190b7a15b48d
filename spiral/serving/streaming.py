"""`stream: true` in `spiral serve`: the reply as server-sent events, the way OpenAI
sends it, so the official client's `stream=True` reads it.

Events: `data: {chat.completion.chunk}` lines, each a JSON chunk with one choice whose
`delta` holds what is new: the first `{"role": "assistant", "content": ""}`, then the
text as the tokens are decoded, then an empty delta with the `finish_reason`; with
`stream_options={"include_usage": true}` a last chunk with no choices and the `usage`
(the chunks before it carry `"usage": null`); then `data: [DONE]`.

The text is sent as the model draws it (the running batch reports each step's tokens,
flight.py; a sampler without one, each slice's, or the whole reply when it is drawn
whole): everything decoded so far, less what might still become part of a stop
string (the last `len(longest stop) - 1` characters) and less a character whose bytes
are not all drawn yet; so the text sent is always the start of the reply the same
request gets unstreamed, and the stop string itself is never sent. Text once sent is not
taken back: where a tokenizer's decoding of a longer reply rewrites text already sent
(none of the byte-level tokenizers Spiral loads does), the end of the reply is sent from
the first character that differs, so the streamed text differs from the unstreamed one
there.
A `guided_choice` reply comes in one delta when it is drawn: the whole choice.

A request refused before sampling (a 400, 413, ...) is answered as usual, not as a
stream. What ends a stream after it began is sent as an error event in OpenAI's shape
(`data: {"error": {...}}`, which the openai client raises as an APIError), then `[DONE]`:
the request's time limit, the server shutting down, a model failure. A client that
leaves mid-stream cancels its request (its row leaves the batch before the next token).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from spiral.engines.base import SamplingCancelled
from spiral.errors import SpiralError
from spiral.serving.flight import Flight
from spiral.serving.openai_api import FINISH_REASON, error_body, reply_text, usage

DONE = "data: [DONE]\n\n"


class TextStream:
    """What of a reply's text may be sent so far (module docstring): `delta(tokens)` for
    the tokens drawn so far, `rest(text)` for the finished reply's text."""

    def __init__(self, decode: Callable[[Sequence[int]], str], stops: Sequence[str]) -> None:
        self.decode, self.stops = decode, stops
        self.hold = max((len(s) for s in stops), default=1) - 1
        self.sent = ""

    def delta(self, tokens: Sequence[int]) -> str:
        text = self.decode(tokens)
        found = [text.index(s) for s in self.stops if s in text]
        if found:
            return self._take(text[: min(found)])
        text = text.rstrip("\ufffd")  # a character whose bytes are not all drawn yet
        return self._take(text[: len(text) - self.hold])

    def rest(self, text: str) -> str:
        if not text.startswith(self.sent):  # decoding more rewrote text already sent
            self.sent = os.path.commonprefix([text, self.sent])
        return self._take(text)

    def _take(self, text: str) -> str:
        if len(text) <= len(self.sent) or not text.startswith(self.sent):
            return ""
        new, self.sent = text[len(self.sent) :], text
        return new


def event(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


class Chunks:
    """The chunk bodies of one streamed reply (one id, one creation time)."""

    def __init__(self, model_name: str, include_usage: bool) -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model_name, self.include_usage = model_name, include_usage

    def choice(self, delta: dict[str, Any], finish_reason: str | None = None) -> str:
        body = self._base([{"index": 0, "delta": delta, "logprobs": None,
                            "finish_reason": finish_reason}])  # fmt: skip
        return event(body)

    def usage(self, counts: dict[str, int]) -> str:
        return event({**self._base([]), "usage": counts})

    def _base(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model_name, "choices": choices}  # fmt: skip
        if self.include_usage:
            body["usage"] = None
        return body


async def stream_reply(
    flight: Flight,
    chunks: Chunks,
    decode: Callable[[Sequence[int]], str],
    choices: Sequence[str] | None,
    timeout_s: float,
) -> AsyncIterator[str]:
    """The events of one streamed reply (module docstring). A client that leaves ends
    this generator (cancelled, or closed); its request is then cancelled."""
    params = flight.params
    text = TextStream(decode, params.stop)
    yield chunks.choice({"role": "assistant", "content": ""})
    try:
        while not flight.work.done():
            if not await flight.watch():
                message = f"the request took longer than this server's limit of {timeout_s:g} s"
                yield event(error_body(f"{message} (spiral serve request_timeout_s=...)"))
                yield DONE
                return
            if flight.latest and choices is None:
                new = text.delta(flight.latest)
                if new:
                    yield chunks.choice({"content": new})
        try:
            completion = await flight.work
        except SamplingCancelled:
            yield event(error_body("the server is shutting down", kind="server_error"))
            yield DONE
            return
        except SpiralError as err:  # the model failed on this request (e.g. NaN logits)
            yield event(error_body(str(err), kind="server_error"))
            yield DONE
            return
        new = text.rest(reply_text(completion, params, flight.constraint, choices))
        if new:
            yield chunks.choice({"content": new})
        yield chunks.choice({}, FINISH_REASON[completion.stop_reason])
        if chunks.include_usage:
            yield chunks.usage(usage(completion, flight.prompt_tokens))
        yield DONE
    finally:
        if not flight.work.done():  # the client left (or the server cancelled us)
            flight.drop()
