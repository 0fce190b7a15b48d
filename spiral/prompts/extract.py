"""Pull answer spans out of model text: `\\boxed{...}` contents and `[...]` spans.

Pure string functions that never raise on any input (a hypothesis test feeds them
adversarial braces, backslashes and unicode).

Choices, following the original SPIRAL extraction (docs/original.md) except where noted:
- `extract_boxed` returns the content of the LAST `\\boxed{...}`, matching braces. If that
  last `\\boxed` is never closed (a reply cut off mid-answer) the result is None: we do not
  fall back to an earlier box, since the model had moved past it. `\\fbox` is not an
  answer. Unlike the original we skip escaped braces (`\\{`, `\\}`) when matching, as LaTeX
  does, and allow spaces between `\\boxed` and `{`.
- A content that is exactly `\\text{...}` is unwrapped once.
- `normalize_answer` turns inner `\\boxed{x}` into `[x]`, collapses whitespace, then
  wraps a short bracket-free answer ("check" -> "[check]"). The original collapsed last;
  collapsing first only means "check " gives "[check]" rather than "[check ]".
"""

from __future__ import annotations

import re

_BOXED = "\\boxed"
_TEXT = "\\text"
_MAX_WRAP_WORDS = 5  # the original wraps answers of at most five words in brackets
_BRACKETED = re.compile(r"\[[^\[\]\n]*\]")


def _brace_matches(text: str) -> dict[int, int]:
    """For every `{` that closes, the index of its `}`, in one pass (a stack).
    A backslash escapes the next character, so `\\{` and `\\}` do not count. Linear
    in the text: a reply of many nested, unclosed `\\boxed{` cannot stall the parser
    (searching for each group's end separately was quadratic: 60 s on 98k characters)."""
    matches: dict[int, int] = {}
    stack: list[int] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            matches[stack.pop()] = i
        i += 1
    return matches


def _command_group(
    text: str, start: int, command: str, matches: dict[int, int]
) -> tuple[int, int] | None:
    """If `command` at `start` is followed (after optional spaces) by `{`, the span
    (content_start, content_end) of its brace group; None when absent or unclosed.
    `matches` is `_brace_matches(text)`."""
    i = start + len(command)
    if i < len(text) and text[i].isalpha():
        return None  # a longer command name, e.g. \boxedx
    while i < len(text) and text[i] in " \t":
        i += 1
    if i >= len(text) or text[i] != "{":
        return None
    end = matches.get(i)
    return None if end is None else (i + 1, end)


def _unwrap_text(content: str) -> str:
    stripped = content.strip()
    if not stripped.startswith(_TEXT):
        return content
    group = _command_group(stripped, 0, _TEXT, _brace_matches(stripped))
    if group is None or group[1] != len(stripped) - 1:
        return content  # \text{...} followed by more material: keep it whole
    return stripped[group[0] : group[1]]


def extract_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` in `text` (braces matched, `\\text{}` unwrapped),
    or None when there is none or the last one is unclosed."""
    pos = text.rfind(_BOXED)
    matches = _brace_matches(text) if pos != -1 else {}
    while pos != -1:
        nxt = pos + len(_BOXED)
        if nxt < len(text) and text[nxt].isalpha():
            pos = text.rfind(_BOXED, 0, pos)  # \boxedfoo is another command; look earlier
            continue
        group = _command_group(text, pos, _BOXED, matches)
        if group is None:
            return None
        return _unwrap_text(text[group[0] : group[1]])
    return None


def _replace_inner_boxed(s: str) -> str:
    out: list[str] = []
    i = 0
    matches = _brace_matches(s) if _BOXED in s else {}
    while True:
        pos = s.find(_BOXED, i)
        if pos == -1:
            out.append(s[i:])
            return "".join(out)
        group = _command_group(s, pos, _BOXED, matches)
        if group is None:
            out.append(s[i : pos + len(_BOXED)])
            i = pos + len(_BOXED)
            continue
        out.append(s[i:pos])
        out.append(f"[{s[group[0] : group[1]]}]")
        i = group[1] + 1


def normalize_answer(s: str) -> str:
    """The original normalisation of an extracted answer: inner `\\boxed{x}` -> `[x]`;
    whitespace runs -> one space, trimmed; no `[`/`]` and at most five words -> wrapped."""
    s = " ".join(_replace_inner_boxed(s).split())
    if "[" not in s and "]" not in s and len(s.split()) <= _MAX_WRAP_WORDS:
        s = f"[{s}]"
    return s


def find_bracketed(text: str) -> list[str]:
    """Every `[...]` span in order of appearance, brackets included. Spans are innermost
    (no `[` or `]` inside) and single-line, so "[a [b] c]" yields "[b]"."""
    return _BRACKETED.findall(text)
