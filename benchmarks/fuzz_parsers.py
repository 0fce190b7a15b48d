"""Fuzz every move parser: N random adversarial replies through `extract_boxed`,
`normalize_answer`, `find_bracketed`, each game's `parse_action` and `parse_move` in every
answer format, plus the committed corpus (tests/prompts/adversarial.py). Counts exceptions
(there must be none) and reports the worst time per call of each parser, with the length
of the input that took it.

Usage: `python benchmarks/fuzz_parsers.py [--n 100000] [--seed 0] [--json PATH]`.
A benchmark script, not a test: times depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spiral import games
from spiral.games.base import State
from spiral.prompts import PromptSpec, extract_boxed, find_bracketed, normalize_answer, parse_move
from spiral.prompts.spec import ANSWER_FORMATS

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.prompts.adversarial import CORPUS  # noqa: E402

PIECES = (
    "\\", "{", "}", "[", "]", "\\boxed", "\\boxed{", "\\boxed {", "\\text{", "\\fbox{", "\\{",
    "\\}", "[4]", "[check]", "[bet]", "[Bid: 3, 5]", "[call]", "[Offer: 2 Wood -> 1 Gold]",
    "[Accept]", "[col 3]", "[roll]", "4", "9999999999", "Move:", "\n", " ", "\t", "é",
    "\U0001f0a1", "\u200b", "\u202e", "\uff3b", "\uff3d", "$", "}}", "{{", "\x00",
)  # fmt: skip


def random_reply(rng: random.Random) -> str:
    """Mostly short mixes of adversarial pieces; sometimes long runs of one piece or of
    random code points (up to ~20k characters)."""
    kind = rng.random()
    if kind < 0.7:
        return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 40)))
    if kind < 0.9:
        return rng.choice(PIECES) * rng.randint(1, 5000)
    return "".join(chr(rng.randint(0, 0x2FFF)) for _ in range(rng.randint(0, 20_000)))


def states_of_every_game(rng: random.Random) -> list[State]:
    states: list[State] = []
    for game_id in games.ids():
        state = games.make(game_id, seed=0)
        states.append(state.clone())
        for _ in range(4):
            if state.is_terminal():
                break
            state.apply_action(rng.choice(state.legal_actions()))
            states.append(state.clone())
    return states


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="random replies")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    states = states_of_every_game(rng)
    specs = {fmt: PromptSpec(template="plain", answer_format=fmt) for fmt in ANSWER_FORMATS}
    worst: dict[str, tuple[float, int]] = {}
    calls: dict[str, int] = {}
    errors: list[str] = []

    def timed(name: str, fn: Callable[[], Any], text: str) -> None:
        t0 = time.perf_counter()
        try:
            fn()
        except Exception:  # counted and reported: the point of a fuzzer
            errors.append(
                f"{name} on {text[:60]!r} ({len(text)} chars): {traceback.format_exc(limit=1)}"
            )
        dt = time.perf_counter() - t0
        calls[name] = calls.get(name, 0) + 1
        if dt > worst.get(name, (0.0, 0))[0]:
            worst[name] = (dt, len(text))

    replies = [*CORPUS, *(random_reply(rng) for _ in range(args.n))]
    started = time.perf_counter()
    for text in replies:
        state = rng.choice(states)
        timed("extract_boxed", lambda t=text: extract_boxed(t), text)
        timed("normalize_answer", lambda t=text: normalize_answer(t), text)
        timed("find_bracketed", lambda t=text: find_bracketed(t), text)
        timed(f"parse_action/{state.game_id}", lambda t=text, s=state: s.parse_action(t), text)
        for fmt, spec in specs.items():
            timed(f"parse_move/{fmt}", lambda t=text, s=state, p=spec: parse_move(t, s, p), text)
    result = {
        "replies": len(replies),
        "corpus": len(CORPUS),
        "calls": sum(calls.values()),
        "exceptions": len(errors),
        "seconds": time.perf_counter() - started,
        "worst_ms": {k: round(v[0] * 1e3, 3) for k, v in sorted(worst.items())},
        "worst_input_chars": {k: v[1] for k, v in sorted(worst.items())},
    }
    print(json.dumps(result, indent=2))
    for line in errors[:10]:
        print(line, file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
