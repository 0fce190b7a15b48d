"""Readable game transcripts: what each seat saw, what the model wrote, what it meant.

`write_transcripts` writes one text file per game into the run's `transcripts/` folder;
`episode_to_dict` gives the same game as JSON-able data. Choices made here:

- **Which games**: up to `limit` per call, taken round-robin over game ids in order of
  first appearance, so a multi-game batch shows every game before repeating one.
- **File names** are `step<NNNNNN>_<index>_<game id>.txt`, with the game id reduced to
  safe characters, so listing the folder sorts them by step.
- **Per turn** the file shows the seat, the agent, the observation exactly as the seat
  saw it, the full response text (Completion.text) and the parsed move or the failure
  kind; scripted turns have no response and show just the move.
- Beside each text file, a `.json` twin (`replay_dict`) that the HTML report replays,
  holding also each model turn's whole prompt as the model read it (template, rules,
  observation, answer instruction), decoded from its token ids.
- `episode_to_dict` keeps token ids and log-probs (lists, not tuples), so a transcript
  can be checked against the training rows built from it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from spiral.types import Episode, Turn

# (agent, prompt token ids) -> the text that agent's model read, or None when the decoder
# does not know that agent's tokenizer.
Decode = Callable[[str, list[int]], str | None]
RULE = "=" * 72
THIN = "-" * 72


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def episode_to_dict(episode: Episode) -> dict[str, Any]:
    """The whole episode as plain JSON-able data (nested dicts and lists)."""
    data = _jsonable(dataclasses.asdict(episode))
    assert isinstance(data, dict)
    return data


def _select(episodes: Sequence[Episode], limit: int) -> list[tuple[int, Episode]]:
    """Up to `limit` (index, episode) pairs, round-robin over game ids."""
    queues: dict[str, list[tuple[int, Episode]]] = {}
    for index, episode in enumerate(episodes):
        queues.setdefault(episode.game_id, []).append((index, episode))
    chosen: list[tuple[int, Episode]] = []
    while len(chosen) < limit and any(queues.values()):
        for queue in queues.values():
            if queue and len(chosen) < limit:
                chosen.append(queue.pop(0))
    return sorted(chosen, key=lambda pair: pair[0])


def _result_line(turn: Turn) -> str:
    parse = turn.parse
    if parse is None:
        return "move: (not parsed)"
    if parse.ok:
        answer = f" (answer {parse.answer!r})" if parse.answer is not None else ""
        return f"move: {parse.move}{answer}"
    failure = parse.failure
    kind = failure.kind if failure is not None else "unknown"
    detail = f": {failure.detail}" if failure is not None and failure.detail else ""
    return f"INVALID ({kind}{detail})"


def _format_turn(number: int, turn: Turn) -> list[str]:
    lines = [
        THIN,
        f"turn {number} | seat {turn.seat} | {turn.agent} | policy v{turn.policy_version}",
    ]
    lines += ["", "[observation]", turn.observation.rstrip()]
    completion = turn.completion
    if completion is not None:
        lines += [
            "",
            f"[response] {len(completion.tokens)} tokens, stop: {completion.stop_reason}",
            completion.text.rstrip(),
        ]
    lines += ["", _result_line(turn), ""]
    return lines


def format_episode(episode: Episode) -> str:
    """The transcript text of one game."""
    agents = ", ".join(f"seat {s}: {a}" for s, a in enumerate(episode.agents))
    returns = ", ".join(f"seat {s}: {r:+g}" for s, r in enumerate(episode.returns))
    ending: str = episode.outcome
    if episode.winner is not None:
        ending += f" (winner seat {episode.winner})"
    if episode.offender is not None:
        ending += f" (invalid move by seat {episode.offender})"
    lines = [
        RULE,
        f"game: {episode.game_id} | seed: {episode.seed}",
        f"agents: {agents}",
        f"outcome: {ending}",
        f"returns: {returns}",
        f"moves: {' '.join(episode.moves) if episode.moves else '(none recorded)'}",
    ]
    lines += [f"{key}: {value}" for key, value in sorted(episode.info.items())]
    lines.append(RULE)
    for number, turn in enumerate(episode.turns, start=1):
        lines += _format_turn(number, turn)
    return "\n".join(lines).rstrip() + "\n"


def replay_dict(episode: Episode, step: int, decode: Decode | None = None) -> dict[str, Any]:
    """A game as the HTML report replays it: per turn what the seat saw, what it wrote
    and what that meant (no token ids, so a long run's replays stay small); with
    `decode`, the prompt each model read, as text, where it knows the model's tokenizer."""
    turns = []
    for turn in episode.turns:
        completion = turn.completion
        turns.append(
            {
                "seat": turn.seat,
                "agent": turn.agent,
                "observation": turn.observation,
                "prompt": (
                    decode(turn.agent, list(turn.prompt_ids))
                    if decode is not None and turn.prompt_ids
                    else None
                ),
                "prompt_tokens": len(turn.prompt_ids),
                "response": completion.text if completion is not None else None,
                "stop": completion.stop_reason if completion is not None else None,
                "result": _result_line(turn),
                "move": turn.move,
            }
        )
    return {
        "step": step,
        "game_id": episode.game_id,
        "seed": episode.seed,
        "agents": list(episode.agents),
        "outcome": episode.outcome,
        "winner": episode.winner,
        "offender": episode.offender,
        "returns": list(episode.returns),
        "moves": list(episode.moves),
        "turns": turns,
    }


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "game"


def write_transcripts(
    episodes: Sequence[Episode],
    folder: Path,
    step: int,
    limit: int = 4,
    decode: Decode | None = None,
) -> list[Path]:
    """Write up to `limit` games as text files (and their JSON replays, with the prompts
    as `decode` reads them back) into `folder`; return the text files' paths."""
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, episode in _select(episodes, limit):
        path = folder / f"step{step:06d}_{index:03d}_{_safe(episode.game_id)}.txt"
        _write(path, format_episode(episode))
        replay = json.dumps(replay_dict(episode, step, decode), ensure_ascii=False)
        _write(path.with_suffix(".json"), replay)
        paths.append(path)
    return paths


def _write(path: Path, text: str) -> None:
    """`path.write_text`, an error naming the file (a full disk's does not)."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(path)) from err


_HEADER = re.compile(r"^game: (?P<game>.+?) \| seed: (?P<seed>-?\d+)$")
_TURN = re.compile(r"^turn \d+ \| seat (?P<seat>\d) \| (?P<agent>.+?) \| policy v-?\d+$")
_RESPONSE = re.compile(r"^\[response\] (?P<tokens>\d+) tokens, stop: (?P<stop>\S+)$")


def parse_transcript(text: str, step: int) -> dict[str, Any]:
    """A text transcript (`format_episode`'s layout) back as `replay_dict` data, for runs
    written before the JSON twins existed. Token counts of prompts are not in the text
    (0); everything the report shows is."""
    lines = text.split("\n")
    game: dict[str, Any] = {"step": step, "turns": [], "moves": [], "returns": []}
    header = _HEADER.match(lines[1]) if len(lines) > 1 else None
    if header:
        game["game_id"], game["seed"] = header["game"], int(header["seed"])
    for line in lines[2:6]:
        key, _, value = line.partition(": ")
        if key == "agents":
            game["agents"] = [part.split(": ", 1)[1] for part in value.split(", ")]
        elif key == "outcome":
            game["outcome"] = value
        elif key == "returns":
            game["returns"] = [float(part.split(": ", 1)[1]) for part in value.split(", ")]
        elif key == "moves" and value != "(none recorded)":
            game["moves"] = value.split(" ")
    for block in text.split(THIN + "\n")[1:]:
        rows = block.rstrip("\n").split("\n")
        turn_line = _TURN.match(rows[0])
        if not turn_line:
            continue
        body = "\n".join(rows[1:])
        observation = body.split("[observation]\n", 1)[-1]
        response = stop = None
        found = next((r for r in rows if _RESPONSE.match(r)), None)
        if found is not None:
            observation = observation.split("\n\n" + found, 1)[0]
            after = body.split(found + "\n", 1)[1]
            response, result = after.rsplit("\n\n", 1) if "\n\n" in after else (after, "")
            stop = _RESPONSE.match(found)["stop"]  # type: ignore[index]
        else:
            observation, result = (observation.rsplit("\n\n", 1) + [""])[:2]
        result = result.strip()
        move = result.split(" ", 2)[1] if result.startswith("move: ") else None
        game["turns"].append(
            {
                "seat": int(turn_line["seat"]),
                "agent": turn_line["agent"],
                "observation": observation.rstrip(),
                "prompt_tokens": 0,
                "response": response,
                "stop": stop,
                "result": result,
                "move": move,
            }
        )
    return game
