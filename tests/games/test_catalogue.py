"""The catalogue of TextArena and OpenSpiel games in docs/games.md: the table is the one
`benchmarks/game_catalogue.py` renders from its stored record, and the record agrees with
what Spiral does now with each id (sampled: a refused id is refused with the same line,
a playable one is accepted, a free-form one is seen as such)."""

from __future__ import annotations

import importlib.util
import json
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spiral.games import registry

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "docs/results/game-catalogue/after.json"
BEFORE = ROOT / "docs/results/game-catalogue/before.json"
GAMES_MD = ROOT / "docs/games.md"


def _catalogue_module() -> Any:
    spec = importlib.util.spec_from_file_location(
        "game_catalogue", ROOT / "benchmarks/game_catalogue.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _record(path: Path = RECORD) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def test_the_docs_table_is_the_rendered_record() -> None:
    catalogue = _catalogue_module()
    block = catalogue.render(_record())
    text = GAMES_MD.read_text(encoding="utf-8")
    shown = text[text.index(catalogue.BEGIN) : text.index(catalogue.END) + len(catalogue.END)]
    assert shown == block


def test_every_game_is_played_or_refused_and_none_fails() -> None:
    catalogue = _catalogue_module()
    rows = _record()["games"]
    states = {r["state"] for r in rows}
    assert "fails" not in states, [r for r in rows if r["state"] == "fails"]
    assert {catalogue.PLAYS, catalogue.FREE} <= states
    for row in rows:
        assert row["state"].startswith(("plays", "refused: ")) or row["state"] == catalogue.BREAKS
        assert bool(row["note"]) == (row["state"] not in (catalogue.PLAYS, catalogue.FREE)), row
        assert "\n" not in row["note"]


def test_random_games_of_playing_ids_ended_zero_sum() -> None:
    """Every random game of a TextArena env the record holds that ended summed to zero
    (the script checked OpenSpiel's zero-sum games by their type as it played)."""
    catalogue = _catalogue_module()
    for row in _record()["games"]:
        for game in row.get("random_games", ()):
            if game["returns"] is None:
                assert row["state"] == catalogue.MIXED
                continue
            ended = game["moves"] < catalogue.MOVE_CAP
            if ended and row["id"].startswith("textarena:"):  # OpenSpiel's: checked by type
                assert abs(sum(game["returns"])) < 1e-9, row


def test_the_before_record_is_the_same_catalogue() -> None:
    before, after = _record(BEFORE), _record()
    assert [r["id"] for r in before["games"]] == [r["id"] for r in after["games"]]


def _same_versions() -> bool:
    if not RECORD.exists():
        return False
    stored = _record()["versions"]
    try:
        here = {"textarena": version("textarena"), "open_spiel": version("open-spiel")}
    except Exception:
        return False
    return all(stored.get(k) == v for k, v in here.items())


ROWS = _record()["games"] if RECORD.exists() else []
CATALOGUE = _catalogue_module()


@given(
    folders=st.lists(st.from_regex(r"[A-Za-z0-9._~-]+", fullmatch=True), min_size=1),
    tail=st.sampled_from(["textarena/envs/x/base", "pkg/file.txt"]),
)
def test_a_note_names_no_machine_folder(folders: list[str], tail: str) -> None:
    """Where a machine installs its packages never enters the record (it differs per clone)."""
    where = "/" + "/".join(folders) + "/lib/python3.11/site-packages/" + tail
    note = CATALOGUE.portable(f"cannot be set up here (FileNotFoundError: {where!r})")
    assert note == f"cannot be set up here (FileNotFoundError: '<site-packages>/{tail}')"


@pytest.mark.skipif(not _same_versions(), reason="the record is of other library versions")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(row=st.sampled_from(ROWS))
def test_the_record_agrees_with_what_spiral_does_now(row: dict[str, Any]) -> None:
    refused = registry.unplayable(row["id"])
    if row["state"].startswith("refused"):
        assert refused is not None and CATALOGUE.portable(refused) == row["note"]
    else:
        assert refused is None
        assert registry.takes_free_moves(row["id"]) == (row["state"] == "plays, free-form moves")
