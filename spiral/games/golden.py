"""Golden transcripts: a seeded random game rendered turn by turn, both seats' views.

`transcript(game_id, seed, style)` is what tests/golden/<game_id>.<style>.txt stores, so
any change to a game's rules text, messages or observation rendering shows up as a diff.

Choices:
- Moves come from a local `random.Random(seed)` choosing uniformly among the legal moves
  (the agents layer sits above games and may not be imported here). The game itself is
  made with the same seed, so a transcript depends on nothing but (game_id, seed, style).
- Every turn shows both seats' observations before the move, then the move; the end shows
  returns, truncation and both final observations. Observations are indented by two
  spaces so a transcript line can never be mistaken for a section header.
- "history" observations only grow, so when a seat's observation extends the one shown
  for it just before, only the new tail is written (marked "continues"). Any change to
  any message still changes the file, and the files stay linear rather than quadratic
  in game length. Likewise a repeat of the seat's rules message (the "latest" style
  starts every observation with it) is written once and then referred to.
- Regenerate after an intended change with `python -m spiral.games.golden --write
  tests/golden` and review the diff.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import get_args

from spiral.games.base import ObsStyle, State
from spiral.games.registry import ids, make

STYLES: tuple[ObsStyle, ...] = get_args(ObsStyle)
GOLDEN_SEED = 0
MAX_MOVES = 500  # a safety net: golden games must end well before this


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" if line else "" for line in text.split("\n"))


def transcript(game_id: str, seed: int, style: str) -> str:
    """Render a seeded uniform-random game of `game_id` with observations in `style`."""
    if style not in STYLES:
        raise ValueError(f"unknown observation style {style!r}; use one of {STYLES}")
    obs_style: ObsStyle = style  # checked just above
    state = make(game_id, seed=seed)
    chooser = random.Random(seed)
    out = [f"# {game_id} seed={seed} style={style}"]
    shown = ["", ""]
    turn = 0
    while not state.is_terminal():
        if turn >= MAX_MOVES:
            raise RuntimeError(f"{game_id} seed={seed} did not end within {MAX_MOVES} moves")
        seat = state.current_player()
        out.append(f"\n=== turn {turn}: seat {seat} to move ===")
        for view in (0, 1):
            out += _observation_lines(state, obs_style, view, shown)
        move = chooser.choice(state.legal_actions())
        out.append(f">>> seat {seat} plays {move}")
        state.apply_action(move)
        turn += 1
    out.append(f"\n=== end after {turn} moves ===")
    out.append(f"returns: {state.returns()} truncated: {state.truncated()}")
    for view in (0, 1):
        out += _observation_lines(state, obs_style, view, shown)
    return "\n".join(out) + "\n"


def _observation_lines(state: State, style: ObsStyle, view: int, shown: list[str]) -> list[str]:
    """Header and body for one observation, abbreviated against what was already shown."""
    obs = state.observation(view, style)
    previous, shown[view] = shown[view], obs
    if previous and obs.startswith(previous):
        tail = obs[len(previous) :]
        if not tail:
            return [f"--- observation of seat {view}: unchanged ---"]
        return [f"--- observation of seat {view} continues ---", _indent(tail)]
    rules = state.rules_text(view)
    if previous and rules and obs.startswith(rules) and previous.startswith(rules):
        rest = obs[len(rules) :]
        return [f"--- observation of seat {view}: its rules as above, then ---", _indent(rest)]
    return [f"--- observation of seat {view} ---", _indent(obs)]


def golden_path(folder: Path, game_id: str, style: str) -> Path:
    return folder / f"{game_id}.{style}.txt"


def write_goldens(folder: Path, game_ids: list[str] | None = None) -> list[Path]:
    """Write every (game, style) golden file into `folder`; returns the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for game_id in game_ids or ids():
        for style in STYLES:
            path = golden_path(folder, game_id, style)
            path.write_text(transcript(game_id, GOLDEN_SEED, style), encoding="utf-8")
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", type=Path, required=True, help="folder, e.g. tests/golden")
    parser.add_argument("games", nargs="*", help="game ids (default: all registered)")
    args = parser.parse_args(argv)
    for path in write_goldens(args.write, args.games or None):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
