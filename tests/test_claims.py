"""The claims table of docs/results.md and README.md's headlines agree with the data the
rows cite (`benchmarks/claims.py`), and the checker catches a changed number, a number no
data backs, a missing data folder and a row nobody can recompute. Reads files only."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import claims  # noqa: E402
from claim_checks.core import (  # noqa: E402
    COLUMNS,
    ROWS,
    VERDICT,
    Outcome,
    Row,
    read_table,
    run_row,
    split_cells,
)

RESULTS = ROOT / "docs" / "results.md"
README = ROOT / "README.md"
# Rows allowed to say "no data" until their data folder exists. Once the folder is there
# the row must agree like any other; delete the entry then.
AWAITING_DATA: dict[str, str] = {}  # row start -> the data folder it waits for


def _outcome(outcomes: list[Outcome], start: str) -> Outcome:
    """The one outcome whose row or headline starts with `start`."""
    (found,) = [o for o in outcomes if o.name.startswith(start)]
    return found


def _replace_in_row(text: str, row_start: str, old: str, new: str) -> str:
    """`text` with `old` replaced by `new` in the one table row that starts with `row_start`."""
    lines = text.splitlines(keepends=True)
    (i,) = [i for i, ln in enumerate(lines) if ln.startswith("| " + row_start)]
    assert old in lines[i], f"{old!r} is not in the row"
    lines[i] = lines[i].replace(old, new)
    return "".join(lines)


def _with_cells(text: str, row_start: str, **cells: str) -> str:
    """`text` with some cells (by column name) of the row starting `row_start` replaced."""
    lines = text.splitlines(keepends=True)
    (i,) = [i for i, ln in enumerate(lines) if ln.startswith("| " + row_start)]
    row = dict(zip(COLUMNS, (c.strip() for c in split_cells(lines[i])), strict=True))
    row.update(cells)
    lines[i] = "| " + " | ".join(row[c] for c in COLUMNS) + " |\n"
    return "".join(lines)


def test_every_claim_and_headline_agrees_with_its_data() -> None:
    outcomes = claims.check(RESULTS, README)
    rows = [o for o in outcomes if not o.name.startswith("README: ")]
    assert len(rows) >= 40 and len(outcomes) - len(rows) >= 8  # the table and the headlines
    waiting = {
        start
        for start, folder in AWAITING_DATA.items()
        if not (ROOT / folder).exists() and _outcome(outcomes, start).status == "no data"
    }
    bad = [
        f"{o.status}: {o.name}: {'; '.join(o.details)}"
        for o in outcomes
        if o.status != "agree" and not any(o.name.startswith(s) for s in waiting)
    ]
    assert not bad, "\n".join(bad)


def test_a_changed_number_is_a_disagreement_naming_both_values(tmp_path: Path) -> None:
    text = RESULTS.read_text(encoding="utf-8")
    planted = tmp_path / "results.md"
    planted.write_text(
        _replace_in_row(text, "a baseline per identical", "**0.94-0.95x**", "**1.05-1.06x**"),
        encoding="utf-8",
    )
    before, after = claims.check(RESULTS), claims.check(planted)
    changed = [a for a, b in zip(after, before, strict=True) if a.status != b.status]
    assert [o.name for o in changed] == [_outcome(after, "a baseline per identical").name]
    details = " ".join(changed[0].details)
    assert changed[0].status == "DISAGREE"
    assert "0.94-0.95x" in details and "1.05" in details and "1.06" in details
    assert claims.main(["--results", str(planted), "--readme", str(README)]) == 1


def test_a_number_no_data_backs_is_a_disagreement(tmp_path: Path) -> None:
    text = RESULTS.read_text(encoding="utf-8")
    planted = tmp_path / "results.md"
    planted.write_text(
        _replace_in_row(text, "parsers never raise", "(one run)", "(one run; 0.321 in another)"),
        encoding="utf-8",
    )
    found = _outcome(claims.check(planted), "parsers never raise")
    assert found.status == "DISAGREE" and "0.321" in " ".join(found.details)


def test_every_verdict_word_flipped_is_a_disagreement() -> None:
    """Each "met" or "missed" the table states comes from a judgement of the number against
    its target: turned into the other word, its row disagrees."""
    table = read_table(RESULTS, ROOT)
    flips = 0
    for row in table.rows:
        for where in ("claim", "value"):
            for found in VERDICT.finditer(row.cells[where]):
                other = "missed" if found.group(1) == "met" else "met"
                text = row.cells[where]
                cells = {**row.cells, where: text[: found.start()] + other + text[found.end() :]}
                outcome = run_row(Row(cells, row.root, row.table), ROWS)
                assert outcome.status != "agree", (row.claim[:60], found.group(1))
                flips += 1
    assert flips >= 10


def test_a_flipped_verdict_in_a_headline_is_a_disagreement(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    text = README.read_text(encoding="utf-8")
    words = list(VERDICT.finditer(text))
    assert words, "the README states no verdict"
    for found in words:
        other = "missed" if found.group(1) == "met" else "met"
        readme.write_text(text[: found.start()] + other + text[found.end() :], encoding="utf-8")
        outcomes = claims.check(RESULTS, readme)
        assert any(o.status != "agree" for o in outcomes if o.name.startswith("README")), found


def _row_with_data_in(tmp_path: Path, start: str) -> Row:
    """The claims row starting `start`, reading a copy of the data it cites in tmp_path."""
    (row,) = [r for r in read_table(RESULTS, ROOT).rows if r.claim.startswith(start)]
    for cited in row.cited():
        source, copy = ROOT / cited, tmp_path / cited
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, copy)
        else:
            shutil.copy(source, copy)
    return Row(row.cells, tmp_path, row.table)


def test_a_probe_case_turned_traceback_is_a_disagreement(tmp_path: Path) -> None:
    row = _row_with_data_in(tmp_path, "damaged files, hostile folders")
    assert run_row(row, ROWS).status == "agree"
    (path,) = (tmp_path / "docs/results/reliability-probe").glob("2026-12-07-full.json")
    data = json.loads(path.read_text())
    first = next(iter(data["outcomes"]))
    data["outcomes"][first]["kind"] = "traceback"  # the summary's tally left as it was
    path.write_text(json.dumps(data))
    assert run_row(row, ROWS).status == "DISAGREE"


def test_a_swapped_leduc_policy_table_is_a_disagreement(tmp_path: Path) -> None:
    row = _row_with_data_in(tmp_path, "the embedded model's Leduc play before training")
    path = tmp_path / "docs/results/leduc-base/base-brief.json"
    data = json.loads(path.read_text())
    table = data["exploitability"]["LeducPoker-v0"]["distributions"]
    for dist in table.values():  # every situation's moves reversed; the numbers left as they were
        moves = list(dist)
        dist.update(zip(moves, reversed([dist[m] for m in moves]), strict=True))
    path.write_text(json.dumps(data))
    assert run_row(row, ROWS).status == "DISAGREE"


def test_a_changed_headline_is_a_disagreement(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    text = README.read_text(encoding="utf-8")
    assert text.count("(0.085 ± 0.018, n = 2)") == 1
    readme.write_text(text.replace("(0.085 ± 0.018, n = 2)", "(0.080 ± 0.018, n = 2)"))
    found = _outcome(claims.check(RESULTS, readme), "README: The async actor-learner")
    assert found.status == "DISAGREE" and "0.085 ± 0.018" in " ".join(found.details)


def test_a_missing_data_folder_is_no_data(tmp_path: Path) -> None:
    """A checkout whose docs/results lacks one folder: that row, and only the rows that
    read it, say "no data", and the checker fails."""
    (tmp_path / "docs" / "results").mkdir(parents=True)
    for entry in (ROOT / "docs" / "results").iterdir():
        if entry.name != "learner-packing":
            (tmp_path / "docs" / "results" / entry.name).symlink_to(entry)
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    outcomes = claims.check(RESULTS, root=tmp_path)
    found = _outcome(outcomes, "packing the learner's rows")
    assert found.status == "no data" and "docs/results/learner-packing/" in found.details[0]
    prose_outcome = outcomes[-1]  # numbers pinned in that folder, if any: no longer held
    assert all("docs/results/learner-packing/" in d for d in prose_outcome.details)
    others = [o.name for o in outcomes if o.status != "agree" and o not in (found, prose_outcome)]
    assert all(any(n.startswith(s) for s in AWAITING_DATA) for n in others), others
    assert claims.main(["--root", str(tmp_path)]) == 1


def test_a_row_without_a_recompute_function_fails(tmp_path: Path) -> None:
    text = RESULTS.read_text(encoding="utf-8")
    anchor = next(ln for ln in text.splitlines() if ln.startswith("| parsers never raise"))
    extra = "| a claim nobody recomputes | speed | 9.99x | CPU | 2026-11-27 | - | `docs/results/fuzz-parsers.json` |"
    planted = tmp_path / "results.md"
    planted.write_text(text.replace(anchor, anchor + "\n" + extra), encoding="utf-8")
    found = _outcome(claims.check(planted), "a claim nobody recomputes")
    assert found.status == "no function"
    assert claims.main(["--results", str(planted), "--readme", str(README)]) == 1


@pytest.mark.parametrize(("passed", "status"), [(1238, "agree"), (1237, "DISAGREE")])
def test_the_make_test_row_reads_its_data_folder(tmp_path: Path, passed: int, status: str) -> None:
    folder = tmp_path / "docs" / "results" / "make-test"
    folder.mkdir(parents=True)
    run = {"passed": passed, "skipped": 7, "failed": 0, "vllm_passed": 10}
    (folder / "2026-11-27.json").write_text(json.dumps(run), encoding="utf-8")
    text = _with_cells(
        RESULTS.read_text(encoding="utf-8"),
        "a fresh clone passes",
        value="1238 passed, 7 skipped, and the 10 vLLM tests",
        data="`docs/results/make-test/`",
    )
    planted = tmp_path / "results.md"
    planted.write_text(text, encoding="utf-8")
    found = _outcome(claims.check(planted, root=tmp_path), "a fresh clone passes make test")
    assert found.status == status, found.details


def test_the_allowance_names_a_row_of_the_table() -> None:
    names = [o.name for o in claims.check(RESULTS)]
    for start in AWAITING_DATA:
        assert any(n.startswith(start) for n in names), f"no row {start!r}: drop its allowance"


def test_a_ci_log_is_recorded_pass_by_pass() -> None:
    import record_make_test

    log = "\n".join(
        [
            "All checks passed!",
            "Success: no issues found in 312 source files",
            "1 failed, 1290 passed, 7 skipped, 2 deselected in 912.30s (0:15:12)",
            "10 passed, 18 warnings in 38.18s",
            "466 passed, 2 skipped, 15 deselected, 1 warning in 401.71s (0:06:41)",
        ]
    )
    got = record_make_test.record(log)
    assert (got["passed"], got["skipped"], got["failed"], got["minutes"]) == (1290, 7, 1, 15.2)
    assert (got["vllm_passed"], got["capped_passed"], got["capped_minutes"]) == (10, 466, 6.7)
    with pytest.raises(SystemExit, match="expected 3"):
        record_make_test.record(log.split("10 passed")[0])


def test_a_missing_table_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert claims.main(["--results", str(tmp_path / "nowhere.md")]) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "--results" in out and "is not a file" in out


# ---- the numbers of docs/results.md outside the claims table ---------------------------

from claim_checks import prose  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

MINI = """# Results

## Claims

| claim |
|---|
| 0.5 |

## A run

It ended at 0.061 from 0.052 (`docs/results/run.jsonl`), against a known value of 0.0556.
Over 12,288 hands, 60% of them bets.

- A later note: 0.052 again.
"""


def _mini(tmp_path: Path) -> Path:
    (tmp_path / "docs/results").mkdir(parents=True)
    rows = [{"step": 1, "x": 0.05234}, {"step": 2, "x": 0.0612}]
    (tmp_path / "docs/results/run.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "docs/results.md").write_text(MINI)
    added, dropped = prose.pin(tmp_path / "docs/results.md", tmp_path)
    assert (len(added), len(dropped)) == (6, 0)
    return tmp_path


def test_prose_numbers_are_pinned_to_the_data_they_cite(tmp_path: Path) -> None:
    root = _mini(tmp_path)
    pins = json.loads((root / prose.PINS).read_text())
    by_value = {p["value"]: p for p in pins.values()}
    assert by_value["0.061"] == {
        "value": "0.061", "file": "docs/results/run.jsonl", "line": 2, "raw": "0.0612"
    }  # fmt: skip
    assert by_value["0.052"]["line"] == 1 and by_value["0.0556"] == {
        "value": "0.0556", "stated": True
    }  # fmt: skip
    # the list item cites nothing itself: its section's citation is where its number is
    assert sum(1 for p in pins.values() if p.get("line") == 1) == 2
    outcome = prose.check_prose(root / "docs/results.md", root)
    assert outcome.status == "agree" and "6 numbers, 3 found in the data they cite, 3 stated" in (
        outcome.name
    )


def test_a_changed_prose_number_or_datum_is_a_disagreement(tmp_path: Path) -> None:
    root = _mini(tmp_path)
    md = root / "docs/results.md"
    md.write_text(MINI.replace("ended at 0.061", "ended at 0.071"))
    (detail,) = prose.check_prose(md, root).details
    assert "text has 0.071, its pin 0.061" in detail
    md.write_text(MINI)
    data = root / "docs/results/run.jsonl"
    data.write_text(data.read_text().replace("0.0612", "0.0712"))
    (detail,) = prose.check_prose(md, root).details
    assert "docs/results/run.jsonl:2 no longer holds it" in detail


def test_new_numbers_need_a_pin_and_gone_ones_leave_none(tmp_path: Path) -> None:
    root = _mini(tmp_path)
    md = root / "docs/results.md"
    md.write_text(MINI.replace("- A later note: 0.052 again.", "- A new note: 1.25 now."))
    details = prose.check_prose(md, root).details
    assert any("1.25 has no pin" in d and "--pin" in d for d in details)
    assert any("1 pin(s) no number of the text has" in d for d in details)
    added, dropped = prose.pin(md, root)
    assert [p["value"] for _, p in added] == ["1.25"] and [p["value"] for _, p in dropped] == [
        "0.052"
    ]
    assert prose.check_prose(md, root).status == "agree"


def _masked_lines() -> list[str]:
    """docs/results.md's lines with code spans blanked (a span may cross a line)."""
    return prose._masked(RESULTS.read_text(encoding="utf-8")).replace("**", "  ").splitlines()


def _planted_lines() -> list[int]:
    """Lines of docs/results.md outside the claims table with a number outside code."""
    lines = _masked_lines()
    start = lines.index("## Claims")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))
    return [i for i, line in enumerate(lines) if not start <= i < end and prose.NUMBER.search(line)]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(i=st.sampled_from(_planted_lines()), bump=st.integers(1, 9))
def test_any_number_changed_in_the_prose_is_a_disagreement(i: int, bump: int) -> None:
    lines = RESULTS.read_text(encoding="utf-8").splitlines(keepends=True)
    m = prose.NUMBER.search(_masked_lines()[i])
    assert m is not None
    old = m.group()
    new = old[:-1] + str((int(old[-1]) + bump) % 10)
    lines[i] = lines[i][: m.start()] + new + lines[i][m.end() :]
    with tempfile.TemporaryDirectory() as tmp:  # the text only: its citations stay in ROOT
        planted = Path(tmp) / "results.md"
        planted.write_text("".join(lines), encoding="utf-8")
        outcome = prose.check_prose(planted, ROOT)
    assert outcome.status == "DISAGREE"
    assert any(
        f"text has {new.replace(',', '')}, its pin {old.replace(',', '')}" in d
        for d in outcome.details
    ), outcome.details
