"""Bounds `spiral serve` checks before it spends time on a request.

- `BodyLimit`: a request body larger than `max_bytes` is answered 413 before it is
  parsed or kept: judged from its Content-Length, or, for a body sent without one
  (chunked), as soon as the bytes read pass the limit. What the client still sends is
  dropped as it arrives for up to DISCARD_S, so that it can read the answer (a client
  that sent `Expect: 100-continue` is answered at once and never sends the body). Without
  it a 50 MB prompt was read, parsed and tokenised (about two minutes and 7.5 GB) before
  the context check refused it.
- `PromptBound`: a prompt whose UTF-8 length alone shows it cannot fit the context is
  refused without tokenising it. No token of the vocabulary covers more than
  `max_token_bytes` bytes of text, so a text of B bytes has at least B / max_token_bytes
  tokens; the bound allows another factor of 4 for tokenizers that normalise text before
  splitting it (a 3-byte full-width letter can become a 1-byte one), so it never refuses
  a prompt that would fit. A long text the bound cannot refuse is counted in pieces cut
  at whitespace, stopping once the pieces hold more than the room plus JOIN_SLACK tokens
  a piece (what joining two pieces could save): a 40,000-word prompt is refused after
  tokenising about a fifth of it, not all of it.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

MAX_BODY_MB = 1.0  # default request body limit (a full 128k-token prompt is ~0.5 MB)
NORMALISATION_SLACK = 4
PIECE_CHARS = 4096  # a long prompt is counted in pieces of about this many characters
JOIN_SLACK = 8  # tokens that joining two pieces at a whitespace could save, at most
DISCARD_S = 2.0  # how long a refused body is read and dropped before the 413


def _reply(status: int, message: str) -> tuple[dict[str, Any], dict[str, Any]]:
    body = json.dumps(
        {"error": {"message": message, "type": "invalid_request_error", "param": None}}
    ).encode()
    start = {
        "type": "http.response.start",
        "status": status,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ],
    }
    return start, {"type": "http.response.body", "body": body}


class BodyLimit:
    """ASGI middleware: 413 for a body over `max_bytes` (see the module docstring). The
    body is read here, up to the limit, and handed on unchanged; after it the app's
    `receive` is the server's own, so a client's disconnect still reaches the handler."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    def _too_large(self, size: int | None) -> str:
        shown = f"{size:,} bytes" if size is not None else "more bytes"
        return (
            f"the request body has {shown}, above this server's limit of "
            f"{self.max_bytes:,} bytes (spiral serve max_request_mb=...)"
        )

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            if headers.get(b"expect", b"").lower() != b"100-continue":  # else never sent
                await _discard(receive)
            await _refuse(send, self._too_large(int(declared)))
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                chunks.clear()
                if message.get("more_body", False):
                    await _discard(receive)
                await _refuse(send, self._too_large(None))
                return
            more = message.get("more_body", False)
        body = b"".join(chunks)
        handed = False

        async def replay() -> Any:
            nonlocal handed
            if not handed:
                handed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _discard(receive: Any) -> None:
    """Read what is left of a refused body and drop it, for at most DISCARD_S: a client
    still sending when the server closes the connection gets a reset instead of the 413,
    and after the reply the server reads no more. Nothing is kept, so memory stays flat."""
    deadline = time.monotonic() + DISCARD_S
    while (left := deadline - time.monotonic()) > 0:
        try:
            message = await asyncio.wait_for(receive(), timeout=left)
        except asyncio.TimeoutError:
            return
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


async def _refuse(send: Any, message: str) -> None:
    for part in _reply(413, message):
        await send(part)


def max_token_bytes(tokenizer: Any) -> int:
    """The most UTF-8 bytes of text one token of `tokenizer` can stand for: the longest
    vocabulary spelling in bytes, plus one. A spelling is never shorter than the text it
    stands for in the tokenizer families Spiral loads (byte-level BPE spells each byte as
    one character of 1-2 bytes, SentencePiece spells a space as the 3-byte "\u2581",
    byte fallback as "<0xNN>"), and reading spellings is fast where decoding every id
    one by one is not."""
    spelled = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return 1 + max((len(str(s).encode("utf-8", "surrogatepass")) for s in spelled), default=1)


class PromptBound:
    """`refusal(text, room)`: why `text` cannot fit in `room` tokens, or None when it
    might (then the caller tokenises it whole and counts exactly). Judged from its length
    alone where that suffices; a long text is then counted piece by piece, stopping as
    soon as the pieces hold more than `room` tokens beyond what joining them could save."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.bytes_per_token = max_token_bytes(tokenizer) * NORMALISATION_SLACK

    def refusal(self, text: str, room: int) -> str | None:
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > room * self.bytes_per_token:
            return (
                f"the prompt has {size:,} bytes of text, more than {room:,} tokens can hold "
                "(the model's context less max_tokens); shorten the messages"
            )
        if len(text) <= 2 * PIECE_CHARS:
            return None
        counted = 0
        for pieces, piece in enumerate(_pieces(text), start=1):
            counted += len(self.tokenizer.encode(piece, add_special_tokens=False))
            if counted - JOIN_SLACK * pieces > room:
                return (
                    f"the prompt has more than {room:,} tokens, which with max_tokens "
                    "exceeds the model's context (counted in part); shorten the messages"
                )
        return None


def _pieces(text: str) -> Any:
    """`text` in pieces of about PIECE_CHARS, each cut just before a whitespace character
    (where tokenizers split words anyway), or whole where there is none."""
    start = 0
    while start < len(text):
        end = min(start + PIECE_CHARS, len(text))
        if end < len(text):
            cut = max(text.rfind(c, start + 1, end) for c in " \n\t")
            end = cut if cut > start else end
        yield text[start:end]
        start = end
