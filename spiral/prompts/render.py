"""Build a turn's prompt from a game state, encode it, and constrain the answer.

- `build_prompt(state, seat, spec, tokenizer)`: the seat's observation (in
  `spec.obs_style`), the answer-format instruction (its example is the first legal move;
  in the "focused" style instead the game's `situation(seat)` and the legal moves; in
  the "brief" style the game's `brief(seat)` alone in place of observation and rules,
  where the game has one, else the focused prompt),
  the template, and with `system_rules` the rules text as a system message. The rules are
  then cut from the front of the observation so the model does not read them twice (only
  when the observation starts with them; otherwise it is left whole).
- Constrained format: the answer follows `answer_marker(spec)` = "\\nMove:". The marker has
  no trailing space on purpose: BPE tokenizers glue a space to the following word, so
  " [4]" is the natural continuation of "Move:" while a prompt ending in a bare space token
  is out of distribution. With think_budget == 0 the prompt ends with the marker and the
  model's very next tokens are the move; with think_budget > 0 the sampler forces the
  marker after the free tokens.
- `encode(text, tokenizer)`: the rule for BOS. Text is encoded without special tokens; the
  tokenizer's BOS is put in front only if the tokenizer adds one by itself
  (`encode("", add_special_tokens=True)` starts with it) and the text does not already
  begin with it. Chat templates that write BOS (Llama-3's "<|begin_of_text|>") therefore
  never get a second one, and plain text still gets the BOS its model expects. No eos is
  ever added.
- `constraint_for(state, spec, tokenizer)`: the token ids of every legal move as they
  follow the marker, taken from the joint encoding of marker + move so merges match what
  the model sees. Choices must be prefix-free for a trie; if two are prefix-related the
  tokenizer's eos id is appended to every choice. Two moves with identical ids are an
  error (the tokenizer cannot tell them apart).

Run `python -m spiral.prompts.render --write tests/golden_prompts` to regenerate the
golden prompt files after a deliberate prompt change.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spiral import games
from spiral.errors import UsageError
from spiral.games.base import State
from spiral.prompts.spec import ANSWER_FORMATS, PromptSpec, TemplateName, answer_marker
from spiral.prompts.templates import focused_instruction, instruction_for, render
from spiral.types import AnswerConstraint, Seat

__all__ = [
    "answer_marker",
    "build_prompt",
    "constraint_for",
    "encode",
    "golden_prompts",
    "main",
    "prefix_free",
    "write_golden",
]

# A message header such as "[GAME] " in the "history" observation style.
_SENDER_PREFIX = re.compile(r"\[[^\]\n]*\] ")


def _without_rules(observation: str, rules: str) -> str:
    if not rules:
        return observation
    rest = observation
    header = _SENDER_PREFIX.match(rest)
    if header and rest[header.end() :].startswith(rules):
        rest = rest[header.end() :]
    if not rest.startswith(rules):
        return observation  # the rules are not at the front: leave the observation whole
    return rest[len(rules) :].lstrip("\n")


def build_prompt(state: State, seat: Seat, spec: PromptSpec, tokenizer: Any = None) -> str:
    """The full prompt text `seat` sees for its turn in `state` under `spec`."""
    if state.is_terminal():
        raise ValueError(
            f"{state.game_id}: the game is over; build prompts only for a seat that still "
            "has a move to make"
        )
    legal = state.legal_actions()  # empty in a game that takes free-form moves
    observation = state.observation(seat, spec.obs_style)
    system = None
    if spec.system_rules:
        rules = state.rules_text(seat)
        observation = _without_rules(observation, rules)
        system = rules.strip() or None
    brief = state.brief(seat) if spec.style == "brief" else None
    if brief is not None:
        observation, system = brief, None  # the brief line is the rules and the situation
    if spec.style in ("focused", "brief") and legal:
        situation = state.situation(seat) if brief is None else None
        instruction = focused_instruction(spec.answer_format, legal, spec.think_budget)
        if situation and situation not in observation:  # a latest view may end with it
            instruction = f"{situation}\n{instruction}"
    else:  # free-form moves have no list to focus on: the game's own example instead
        instruction = instruction_for(spec.answer_format, state.move_example(), spec.think_budget)
    text = render(spec.template, observation, instruction, system=system, tokenizer=tokenizer)
    if spec.answer_format == "constrained" and spec.think_budget == 0:
        text += answer_marker(spec)
    return text


def _adds_bos(tokenizer: Any) -> bool:
    bos = tokenizer.bos_token_id
    if bos is None:
        return False
    ids = tokenizer.encode("", add_special_tokens=True)
    return bool(ids) and ids[0] == bos


def encode(text: str, tokenizer: Any) -> list[int]:
    """Token ids of `text`, with at most one leading BOS (see the module docstring)."""
    ids: list[int] = list(tokenizer.encode(text, add_special_tokens=False))
    if not _adds_bos(tokenizer) or (ids and ids[0] == tokenizer.bos_token_id):
        return ids
    return [tokenizer.bos_token_id, *ids]


def _ids_after(prefix: str, text: str, tokenizer: Any) -> tuple[int, ...]:
    """Ids of `text` as they follow `prefix`: the tail of the joint encoding when it splits
    cleanly at the prefix, else `text` encoded alone (a merge across the boundary)."""
    head = tokenizer.encode(prefix, add_special_tokens=False)
    joint = tokenizer.encode(prefix + text, add_special_tokens=False)
    if joint[: len(head)] == head and len(joint) > len(head):
        return tuple(joint[len(head) :])
    return tuple(tokenizer.encode(text, add_special_tokens=False))


def prefix_free(
    choices: Sequence[tuple[int, ...]], eos_id: int | None, names: Sequence[str] = ()
) -> tuple[tuple[int, ...], ...]:
    """`choices` unchanged if no one is a prefix of another, else each with `eos_id`
    appended (which makes them prefix-free when they are distinct)."""
    label = list(names) or [str(c) for c in choices]
    seen: dict[tuple[int, ...], str] = {}
    for choice, name in zip(choices, label, strict=True):
        if not choice:
            raise ValueError(f"move {name} encodes to no tokens; it cannot be a constrained choice")
        if choice in seen:
            raise ValueError(
                f"moves {seen[choice]} and {name} encode to the same token ids {list(choice)}; "
                "the tokenizer cannot tell them apart, so use the boxed or bracket format"
            )
        seen[choice] = name
    ordered = sorted(choices)  # a prefix sorts right before the choices that extend it
    related = any(b[: len(a)] == a for a, b in zip(ordered, ordered[1:], strict=False))
    if not related:
        return tuple(choices)
    if eos_id is None:
        raise ValueError(
            "constrained choices are prefix-related and the tokenizer has no eos id to end "
            "them; set tokenizer.eos_token or use the boxed or bracket format"
        )
    return tuple((*c, eos_id) for c in choices)


def constraint_for(state: State, spec: PromptSpec, tokenizer: Any) -> AnswerConstraint | None:
    """The answer restriction for the constrained format (None for other formats)."""
    if spec.answer_format != "constrained":
        return None
    legal = state.legal_actions()
    if not legal:  # a UsageError is also the ValueError it was: one line, not a traceback
        raise UsageError(
            f"{state.game_id} lists no moves at this position (its moves are free-form here, "
            f"after {len(state.move_history)} moves), so answer_format=constrained has nothing "
            "to constrain the answer to: use answer_format=bracket or boxed for this game"
        )
    marker_text = answer_marker(spec)
    raw = [_ids_after(marker_text, " " + move, tokenizer) for move in legal]
    choices = prefix_free(raw, tokenizer.eos_token_id, legal)
    marker: tuple[int, ...] = ()
    if spec.think_budget > 0:
        marker = tuple(tokenizer.encode(marker_text, add_special_tokens=False))
    return AnswerConstraint(choices=choices, marker=marker, think_budget=spec.think_budget)


# ---- golden prompt files -------------------------------------------------------------

GOLDEN_GAMES = ("TicTacToe-v0", "KuhnPoker-v1", "KuhnPokerSingle-v0")
GOLDEN_TEMPLATES: tuple[TemplateName, ...] = ("qwen3", "plain")
GOLDEN_SEATS: tuple[Seat, ...] = (0, 1)


def golden_name(
    game_id: str, seat: Seat, template: str, answer_format: str, extra: str = ""
) -> str:
    return f"{game_id}__seat{seat}__{template}__{answer_format}{extra}.txt"


def golden_state(game_id: str, seat: Seat) -> State:
    """Seed 0, then the first legal move at every turn until `seat` is to move."""
    state = games.make(game_id, seed=0)
    while state.current_player() != seat:
        if state.is_terminal():
            raise RuntimeError(f"{game_id}: ended before seat {seat} had a move")
        state.apply_action(state.legal_actions()[0])
    return state


def golden_prompts(game_id: str) -> dict[str, str]:
    """File name -> prompt text for every golden case of `game_id`."""
    out: dict[str, str] = {}
    for seat in GOLDEN_SEATS:
        state = golden_state(game_id, seat)
        for template in GOLDEN_TEMPLATES:
            for fmt in ANSWER_FORMATS:
                spec = PromptSpec(template=template, answer_format=fmt)
                out[golden_name(game_id, seat, template, fmt)] = build_prompt(state, seat, spec)
        # One case with the rules moved into a system message.
        spec = PromptSpec(template="qwen3", answer_format="bracket", system_rules=True)
        name = golden_name(game_id, seat, "qwen3", "bracket", "__system_rules")
        out[name] = build_prompt(state, seat, spec)
        # The focused style (situation and private information last, no example move).
        spec = PromptSpec(template="qwen3", answer_format="constrained", style="focused")
        name = golden_name(game_id, seat, "qwen3", "constrained", "__focused")
        out[name] = build_prompt(state, seat, spec)
        # The brief style (one line of rules and the position; focused where no brief).
        spec = PromptSpec(template="qwen3", answer_format="constrained", style="brief")
        name = golden_name(game_id, seat, "qwen3", "constrained", "__brief")
        out[name] = build_prompt(state, seat, spec)
    return out


def write_golden(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    known = set(games.ids())
    for game_id in GOLDEN_GAMES:
        if game_id not in known:
            print(f"skipped {game_id}: not registered in spiral.games", file=sys.stderr)
            continue
        for name, text in golden_prompts(game_id).items():
            path = directory / name
            path.write_text(text, encoding="utf-8", newline="")
            written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the golden prompt files.")
    parser.add_argument("--write", type=Path, required=True, help="folder for the files")
    args = parser.parse_args(argv)
    for path in write_golden(args.write):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
