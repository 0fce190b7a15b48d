"""Transcripts: real files with the header, observations, responses and parse results."""

from __future__ import annotations

import json
from pathlib import Path

from spiral.report.transcripts import episode_to_dict, format_episode, write_transcripts
from spiral.types import Completion, Episode, ParseFailure, ParseResult, Turn

TTT = "TicTacToe-v0"


def _ttt_episode(seed: int = 7) -> Episode:
    good = Turn(
        TTT,
        0,
        "policy",
        "You are X.\nBoard:\n . . .",
        (1, 2),
        Completion((5, 6, 7), (-0.1, -0.2, -0.3), "eos", "I take the centre. \\boxed{4}"),
        ParseResult("[4]", answer="4"),
        policy_version=3,
    )
    scripted = Turn(TTT, 1, "random", "You are O.", parse=ParseResult("[0]"))
    bad = Turn(
        TTT,
        0,
        "policy",
        "Board again",
        (1, 2),
        Completion((8,), (-2.0,), "length", "hmm"),
        ParseResult(None, ParseFailure("no_answer", "no \\boxed{}")),
    )
    return Episode(
        TTT,
        seed,
        (good, scripted, bad),
        (-1.5, 0.5),
        "invalid",
        winner=1,
        offender=0,
        agents=("policy", "random"),
        moves=("[4]", "[0]"),
    )


def test_transcript_file_contents(tmp_path: Path) -> None:
    paths = write_transcripts([_ttt_episode()], tmp_path / "transcripts", step=12)
    assert [p.name for p in paths] == ["step000012_000_TicTacToe-v0.txt"]
    text = paths[0].read_text(encoding="utf-8")
    assert text == format_episode(_ttt_episode())
    for expected in (
        "game: TicTacToe-v0 | seed: 7",
        "agents: seat 0: policy, seat 1: random",
        "outcome: invalid (winner seat 1) (invalid move by seat 0)",
        "returns: seat 0: -1.5, seat 1: +0.5",
        "moves: [4] [0]",
        "turn 1 | seat 0 | policy | policy v3",
        "You are X.\nBoard:\n . . .",
        "[response] 3 tokens, stop: eos\nI take the centre. \\boxed{4}",
        "move: [4] (answer '4')",
        "turn 2 | seat 1 | random",
        "move: [0]",
        "[response] 1 tokens, stop: length\nhmm",
        "INVALID (no_answer: no \\boxed{})",
    ):
        assert expected in text, f"missing {expected!r} in:\n{text}"
    # The scripted turn has no response block.
    scripted_block = text.split("turn 2 |")[1].split("turn 3 |")[0]
    assert "[response]" not in scripted_block


def test_limit_is_round_robin_over_games(tmp_path: Path) -> None:
    kuhn = Episode("KuhnPoker-v1", 1, (), (1.0, -1.0), "win", winner=0)
    episodes = [_ttt_episode(0), _ttt_episode(1), _ttt_episode(2), kuhn]
    paths = write_transcripts(episodes, tmp_path, step=3, limit=2)
    # One TicTacToe game and the Kuhn game, not two TicTacToe games.
    assert [p.name for p in paths] == [
        "step000003_000_TicTacToe-v0.txt",
        "step000003_003_KuhnPoker-v1.txt",
    ]
    assert write_transcripts(episodes, tmp_path / "none", step=3, limit=0) == []
    assert len(write_transcripts(episodes, tmp_path / "all", step=3, limit=10)) == 4


def test_unsafe_game_ids_make_safe_names(tmp_path: Path) -> None:
    odd = Episode("textarena/Chess v0", 0, (), (0.0, 0.0), "draw")
    (path,) = write_transcripts([odd], tmp_path, step=0)
    assert path.name == "step000000_000_textarena_Chess_v0.txt"
    assert path.parent == tmp_path


def test_episode_to_dict_is_json_round_trippable() -> None:
    data = episode_to_dict(_ttt_episode())
    assert json.loads(json.dumps(data)) == data
    assert data["returns"] == [-1.5, 0.5]
    assert data["turns"][0]["completion"]["tokens"] == [5, 6, 7]
    assert data["turns"][1]["completion"] is None
    assert data["turns"][2]["parse"]["failure"] == {"kind": "no_answer", "detail": "no \\boxed{}"}
