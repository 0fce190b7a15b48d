"""A committed corpus of adversarial replies: what a degenerate or hostile model output can
look like. Every parser must answer each of them without raising, in time linear in its
length (`benchmarks/fuzz_parsers.py` times them; tests only check they never raise)."""

from __future__ import annotations

N = 100_000  # characters in the long cases

CORPUS: tuple[str, ...] = (
    "",
    " ",
    "\x00" * 64,
    "\\boxed{" * (N // 7),  # nested, never closed: was quadratic (60 s at 98k characters)
    "\\boxed{" * (N // 14) + "}" * (N // 14),  # nested and closed
    "\\boxed{" * 5000 + "4" + "}" * 4999,  # one brace short
    "{" * N,
    "}" * N,
    "\\" * N,
    "\\{" * (N // 2),
    "[" * N,
    "]" * N,
    "[" + "9" * N + "]",  # int() of > 4,300 digits raised ValueError in ConnectFour
    "[col " + "9" * 5000 + "]",
    "[Bid: " + "9" * 5000 + ", " + "9" * 5000 + "]",
    "[Offer: " + "9" * 5000 + " Wood -> 1 Gold]",
    "\\boxed{" + "9" * 5000 + "}",
    "[4]" * (N // 3),  # many legal-looking spans
    "[4] or [5]\n" * 5000,
    "Move: " * (N // 6),
    "\\text{" * (N // 6),
    "\\boxed{\\text{" * 3000 + "[check]" + "}" * 6000,
    "\u202e[4]\u202c",  # bidi controls
    "\u200b[\u200b4\u200b]",  # zero-width spaces
    "\uff3b4\uff3d",  # full-width brackets
    "\U0001f0a1" * 1000,
    "\r\n" * 1000 + "[check]",
    "[" + "a" * 10_000 + "]",
    "\\boxed {  } \\boxed{}",
    "\\boxedx{4} \\fbox{4}",
    "e" * N,
)
