"""Golden transcripts: every registered game's messages and observations, per style.

A failing comparison means some prompt text changed. If the change is intended,
regenerate with `python -m spiral.games.golden --write tests/golden` and review the diff.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from spiral.games import ids
from spiral.games.golden import GOLDEN_SEED, STYLES, golden_path, transcript

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("game_id", ids())
def test_transcript_matches_golden(game_id: str, style: str) -> None:
    path = golden_path(GOLDEN_DIR, game_id, style)
    if not path.exists():
        pytest.skip(
            f"no golden file {path.name} yet; create it with "
            f"`python -m spiral.games.golden --write tests/golden {game_id}`"
        )
    expected = path.read_text(encoding="utf-8")
    actual = transcript(game_id, GOLDEN_SEED, style)
    if actual != expected:
        diff = "".join(
            list(
                difflib.unified_diff(
                    expected.splitlines(keepends=True),
                    actual.splitlines(keepends=True),
                    fromfile=f"golden/{path.name}",
                    tofile="now",
                )
            )[:60]
        )
        pytest.fail(
            f"{game_id} ({style}) transcript changed. If intended, regenerate with "
            f"`python -m spiral.games.golden --write tests/golden` and review the diff.\n{diff}"
        )


def test_transcript_is_deterministic_and_shows_both_seats() -> None:
    text = transcript("TicTacToe-v0", 3, "latest")
    assert text == transcript("TicTacToe-v0", 3, "latest")
    assert text.startswith("# TicTacToe-v0 seed=3 style=latest\n")
    assert "--- observation of seat 0 ---" in text and "--- observation of seat 1 ---" in text
    assert ">>> seat 0 plays [" in text and "=== end after " in text


def test_transcript_rejects_unknown_style() -> None:
    with pytest.raises(ValueError, match="style"):
        transcript("TicTacToe-v0", 0, "fancy")
