"""load_math(): every shipped sample loads through its benchmark's field mapping, local
files and folders load with the common keys, subsets are seeded, errors say what to do."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from spiral.evaluation.mathbench.data import (
    ANSWER_FORMS,
    BENCHMARKS,
    DATA_DIR,
    MathProblem,
    load_math,
    sample_names,
)
from spiral.evaluation.mathbench.grading import grade


def test_every_benchmark_has_a_sample_and_a_valid_answer_form() -> None:
    assert set(sample_names()) == set(BENCHMARKS)
    assert {"math500", "aime24", "aime25", "amc23", "minerva", "olympiadbench", "gsm8k"} <= set(
        BENCHMARKS
    )
    for spec in BENCHMARKS.values():
        assert spec.answer_form in ANSWER_FORMS


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_sample_loads_with_its_benchmark_schema(name: str) -> None:
    problems = load_math(f"sample:{name}")
    assert 5 <= len(problems) <= 10
    assert len({p.id for p in problems}) == len(problems)
    for p in problems:
        assert p.source == f"sample:{name}"
        assert p.problem and p.answer
        assert "####" not in p.answer and not p.answer.startswith("$")
        assert grade(p.answer, p.answer)  # every reference answer is gradeable


def test_answer_forms_pick_the_final_answer() -> None:
    gsm = load_math("sample:gsm8k")[0]
    assert gsm.answer == "25"  # from "...\n#### 25"
    olympiad = {p.id: p.answer for p in load_math("sample:olympiadbench")}
    assert olympiad["9001"] == "3, 4"  # a list of answers, $ stripped, joined
    math500 = load_math("sample:math500")[0]
    assert math500.id == "test/prealgebra/sample-1.json" and math500.answer == "\\frac{19}{24}"


def test_limit_is_a_seeded_subset_in_file_order() -> None:
    full = load_math("sample:gsm8k")
    a = load_math("sample:gsm8k", limit=3, seed=1)
    assert a == load_math("sample:gsm8k", limit=3, seed=1)
    assert len(a) == 3 and set(a) <= set(full)
    assert [full.index(p) for p in a] == sorted(full.index(p) for p in a)
    others = {tuple(p.id for p in load_math("sample:gsm8k", limit=3, seed=s)) for s in range(6)}
    assert len(others) > 1  # the seed matters
    assert load_math("sample:gsm8k", limit=100) == full
    with pytest.raises(ValueError, match="limit"):
        load_math("sample:gsm8k", limit=0)


def _write_jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_local_file_with_common_keys(tmp_path: Path) -> None:
    rows: list[dict[str, object]] = [
        {"question": "What is 2 + 3?", "answer": "Two plus three.\n#### 5"},  # GSM8K style
        {"problem": "Half of 1?", "solution": "It is $\\boxed{\\frac12}$."},  # MATH style
        {"Problem": "Roots of x^2 = 4?", "final_answer": ["$-2$", "$2$"], "id": 7},
    ]
    problems = load_math(str(_write_jsonl(tmp_path / "mine.jsonl", rows)))
    assert [p.answer for p in problems] == ["5", "\\frac12", "-2, 2"]
    assert [p.id for p in problems] == ["mine-0", "mine-1", "7"]
    assert all(p.source == "mine" for p in problems)


def test_folder_of_files_loads_in_name_order(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "b.jsonl", [{"question": "q2", "answer": "2"}])
    (tmp_path / "a.json").write_text(json.dumps([{"question": "q1", "answer": 1}]))
    (tmp_path / "notes.txt").write_text("ignored")
    problems = load_math(str(tmp_path))
    assert problems == [
        MathProblem(
            id=f"{tmp_path.name}/a-0", problem="q1", answer="1", source=f"{tmp_path.name}/a"
        ),
        MathProblem(
            id=f"{tmp_path.name}/b-0", problem="q2", answer="2", source=f"{tmp_path.name}/b"
        ),
    ]


def test_copy_of_a_shipped_sample_loads_as_a_local_file(tmp_path: Path) -> None:
    for name in sorted(BENCHMARKS):
        copy = tmp_path / f"{name}.jsonl"
        copy.write_text((DATA_DIR / f"{name}.jsonl").read_text(encoding="utf-8"))
        local = [p.answer for p in load_math(str(copy))]
        assert local == [p.answer for p in load_math(f"sample:{name}")], name


def test_bad_inputs_fail_with_advice(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="valid: aime24"):
        load_math("sample:nope")
    with pytest.raises(FileNotFoundError, match="not a file"):
        load_math("no such thing")
    bad = _write_jsonl(tmp_path / "bad.jsonl", [{"text": "no fields"}])
    with pytest.raises(ValueError, match="need a problem field"):
        load_math(str(bad))
    gsm = _write_jsonl(tmp_path / "g.jsonl", [{"question": "q", "answer": "no hashes"}])
    assert load_math(str(gsm))[0].answer == "no hashes"  # auto: the field as it is
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no .jsonl"):
        load_math(str(tmp_path / "empty"))


def test_hub_benchmark_offline_says_to_pass_a_local_file(monkeypatch: pytest.MonkeyPatch) -> None:
    # Never downloads: offline mode makes `datasets` fail fast; without `datasets` the
    # import fails. Both errors must point to local files and the shipped samples.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    # The libraries read those variables at import; if an earlier test imported them, set
    # the flags they already read, so no test ever waits on network retries.
    for module in ("huggingface_hub.constants", "datasets.config"):
        if module in sys.modules:
            monkeypatch.setattr(sys.modules[module], "HF_HUB_OFFLINE", True)
    with pytest.raises((ImportError, RuntimeError), match="sample:gsm8k|local"):
        load_math("gsm8k")
