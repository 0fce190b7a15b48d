"""Read a move out of a model's reply: `parse_move(text, state, spec) -> ParseResult`.

One parser per answer format (a registry), each returning a canonical legal move or a
typed failure. Legality is always the game's own `state.parse_action`, which is case- and
whitespace-tolerant, so "\\boxed{Check}" is "[check]" (the original's case-sensitive check
rejected it; docs/original.md).

Rules:
- boxed: the last `\\boxed{...}` (see extract.py), normalised ("4" -> "[4]"), then
  `parse_action`. No box or an empty one -> "no_answer"; a box that is not a legal move ->
  "not_legal". Unlike OAT we never fall back to the whole reply when there is no box.
- bracket: among the `[...]` spans, the LAST one that is a legal move wins, so a reply may
  discuss moves before giving its own. One exception, "ambiguous": the final non-empty
  line names two or more different legal moves (e.g. "I'd play [3] or [4]", or an echoed
  "Available Moves: [0], [1], ..." list), since then the last one is not a choice. Spans
  but none legal -> "not_legal"; no span -> "no_answer".
- constrained: the text after the last answer marker ("Move:"), or the whole text if the
  marker is absent (the prompt ended with it), stripped, must be exactly one legal move.
  Decode completions with skip_special_tokens so an appended eos does not show up here.
- truncated=True (the sampler hit its length limit) turns any failure into "truncated",
  keeping the underlying reason in `detail`: the model ran out of room before answering.

`ParseResult.answer` holds the raw extracted span. `parse_move` never raises on any text;
an exception from `state.parse_action` is a bug in that game and is left to propagate.
Only the last `MAX_PARSE_CHARS` characters of a reply are read (the answer comes last in
every format), and every step is linear in that length, so a long degenerate reply costs
milliseconds (`benchmarks/fuzz_parsers.py` measures the worst case).
"""

from __future__ import annotations

from collections.abc import Callable

from spiral.games.base import State
from spiral.prompts.extract import extract_boxed, find_bracketed, normalize_answer
from spiral.prompts.spec import AnswerFormat, PromptSpec, answer_marker
from spiral.types import ParseFailure, ParseFailureKind, ParseResult

MAX_PARSE_CHARS = 65_536


def _fail(kind: ParseFailureKind, detail: str, answer: str | None = None) -> ParseResult:
    return ParseResult(move=None, failure=ParseFailure(kind, detail), answer=answer)


def _parse_boxed(text: str, state: State, spec: PromptSpec) -> ParseResult:
    content = extract_boxed(text)
    if content is None:
        return _fail("no_answer", "no complete \\boxed{...} in the reply")
    if not content.strip():
        return _fail("no_answer", "the \\boxed{} is empty", answer=content)
    normalized = normalize_answer(content)
    move = state.parse_action(normalized)
    if move is None:
        return _fail("not_legal", f"{normalized!r} is not a legal move", answer=content)
    return ParseResult(move=move, answer=content)


def _final_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _parse_bracket(text: str, state: State, spec: PromptSpec) -> ParseResult:
    spans = find_bracketed(text)
    if not spans:
        return _fail("no_answer", "no [bracketed] move in the reply")
    on_final_line = {state.parse_action(s) for s in find_bracketed(_final_line(text))}
    on_final_line.discard(None)
    if len(on_final_line) > 1:
        named = ", ".join(sorted(m for m in on_final_line if m is not None))
        return _fail("ambiguous", f"the last line names several legal moves: {named}")
    for span in reversed(spans):
        move = state.parse_action(span)
        if move is not None:
            return ParseResult(move=move, answer=span)
    return _fail("not_legal", f"none of {len(spans)} bracketed spans is legal", answer=spans[-1])


def _parse_constrained(text: str, state: State, spec: PromptSpec) -> ParseResult:
    marker = answer_marker(spec).strip()
    pos = text.rfind(marker)
    answer = (text[pos + len(marker) :] if pos != -1 else text).strip()
    if not answer:
        return _fail("no_answer", f"nothing after the answer marker {marker!r}")
    move = state.parse_action(answer)
    if move is None:
        return _fail("not_legal", f"{answer!r} is not exactly one legal move", answer=answer)
    return ParseResult(move=move, answer=answer)


_PARSERS: dict[AnswerFormat, Callable[[str, State, PromptSpec], ParseResult]] = {
    "boxed": _parse_boxed,
    "bracket": _parse_bracket,
    "constrained": _parse_constrained,
}


def parse_move(text: str, state: State, spec: PromptSpec, truncated: bool = False) -> ParseResult:
    """The legal move `text` gives for `state` under `spec.answer_format`, or a typed
    failure ("no_answer", "not_legal", "ambiguous", "truncated")."""
    result = _PARSERS[spec.answer_format](text[-MAX_PARSE_CHARS:], state, spec)
    if truncated and result.failure is not None:
        reason = f"{result.failure.kind}: {result.failure.detail}"
        return _fail("truncated", f"cut off at the length limit ({reason})", result.answer)
    return result
