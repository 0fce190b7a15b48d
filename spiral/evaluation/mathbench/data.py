"""Math benchmark problems: the registry of public benchmarks and one loader for all sources.

`load_math(name_or_path)` returns `MathProblem`s (id, problem text, final answer, source)
from, in this order:

1. a shipped sample, `"sample:<name>"` (e.g. `"sample:gsm8k"`): a handful of ORIGINAL
   problems written for Spiral's tests in that benchmark's schema (spiral/evaluation/mathbench/data/);
2. a local `.jsonl` / `.json` file, or a folder of them (read in name order);
3. a registered benchmark name (`BENCHMARKS`: math500, aime24, aime25, amc23, minerva,
   olympiadbench, gsm8k), downloaded with `datasets.load_dataset` (imported lazily: the
   `math` extra), or any other hub id, read with the common field names below.

Choices:
- Each benchmark's `BenchmarkSpec` names its hub id, configs, split, the problem and answer
  fields, and how the final answer is written (`answer_form`, a key of `ANSWER_FORMS`):
  GSM8K's solution ends "#### 42"; OlympiadBench lists answers; MATH-style data may only
  have a solution with a `\\boxed{}`. Shipped samples use their benchmark's spec; other
  local files and unregistered hub ids use `auto`, which tries the common field names
  (`problem`, `question`, ...; `answer`, `final_answer`, ..., then `solution`) and
  recognises each registered benchmark's answer form, so a downloaded copy of any of
  them loads as a local file.
- Several answers in a list (OlympiadBench multi-answer rows) are joined with ", " so
  math-verify compares them as a set / tuple.
- `limit` takes a seeded random subset (same `seed`, same problems), kept in file order.
- Nothing is downloaded unless a hub name is asked for; tests only use samples and files.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spiral.prompts.extract import extract_boxed

DATA_DIR = Path(__file__).resolve().parent / "data"
SAMPLE_PREFIX = "sample:"

PROBLEM_KEYS = ("problem", "question", "Problem", "Question", "prompt")
ANSWER_KEYS = ("answer", "final_answer", "Answer", "gt", "ground_truth", "target")
SOLUTION_KEYS = ("solution", "Solution")
ID_KEYS = ("id", "unique_id", "ID", "idx", "problem_idx")


@dataclass(frozen=True)
class MathProblem:
    """One benchmark question and its reference final answer (a string, usually LaTeX)."""

    id: str
    problem: str
    answer: str
    source: str


@dataclass(frozen=True)
class BenchmarkSpec:
    """Where a public benchmark lives on the Hugging Face hub and how its rows read."""

    hub_id: str
    split: str
    problem_field: str
    answer_field: str
    answer_form: str  # a key of ANSWER_FORMS
    configs: tuple[str | None, ...] = (None,)  # all are loaded and concatenated
    id_field: str | None = None
    licence: str = "unknown"  # as best known; see docs/math-eval.md


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v) for v in value)
    text = str(value).strip()
    if len(text) > 1 and text.startswith("$") and text.endswith("$"):
        text = text.strip("$").strip()
    return text


def _after_hashes(value: Any) -> str:
    """GSM8K: the answer is what follows the last '####' of the worked solution."""
    text = str(value)
    if "####" not in text:
        raise ValueError(f"expected a GSM8K answer ending '#### <number>', got {text[-80:]!r}")
    return _text(text.rsplit("####", 1)[1]).replace(",", "")


def _boxed(value: Any) -> str:
    """MATH-style worked solution: the answer is the last \\boxed{...}."""
    found = extract_boxed(str(value))
    if found is None:
        raise ValueError(f"expected a \\boxed{{}} answer in the solution, got {str(value)[-80:]!r}")
    return _text(found)


def _auto(value: Any) -> str:
    if isinstance(value, str) and "####" in value:
        return _after_hashes(value)
    if isinstance(value, str) and "\\boxed" in value:
        return _boxed(value)
    return _text(value)


ANSWER_FORMS: dict[str, Callable[[Any], str]] = {
    "plain": _text,  # the field is the answer (lists joined)
    "after_hashes": _after_hashes,
    "boxed": _boxed,
    "auto": _auto,
}

_MAA = "problems (c) MAA; no dataset licence stated"

BENCHMARKS: dict[str, BenchmarkSpec] = {
    "math500": BenchmarkSpec(
        hub_id="HuggingFaceH4/MATH-500",
        split="test",
        problem_field="problem",
        answer_field="answer",
        answer_form="plain",
        id_field="unique_id",
        licence="MIT (the MATH dataset, Hendrycks et al.)",
    ),
    "aime24": BenchmarkSpec(
        hub_id="HuggingFaceH4/aime_2024",
        split="train",
        problem_field="problem",
        answer_field="answer",
        answer_form="plain",
        id_field="id",
        licence=_MAA,
    ),
    "aime25": BenchmarkSpec(
        hub_id="opencompass/AIME2025",
        split="test",
        problem_field="question",
        answer_field="answer",
        answer_form="plain",
        configs=("AIME2025-I", "AIME2025-II"),
        licence=_MAA,
    ),
    "amc23": BenchmarkSpec(
        hub_id="math-ai/amc23",
        split="test",
        problem_field="question",
        answer_field="answer",
        answer_form="plain",
        licence=_MAA,
    ),
    "minerva": BenchmarkSpec(
        hub_id="math-ai/minervamath",
        split="test",
        problem_field="question",
        answer_field="answer",
        answer_form="plain",
        licence="problems from MIT OpenCourseWare (CC BY-NC-SA); no dataset licence stated",
    ),
    "olympiadbench": BenchmarkSpec(
        hub_id="Hothan/OlympiadBench",
        split="train",
        problem_field="question",
        answer_field="final_answer",
        answer_form="plain",
        configs=("OE_TO_maths_en_COMP",),
        id_field="id",
        licence="Apache-2.0 (dataset card)",
    ),
    "gsm8k": BenchmarkSpec(
        hub_id="openai/gsm8k",
        split="test",
        problem_field="question",
        answer_field="answer",
        answer_form="after_hashes",
        configs=("main",),
        licence="MIT",
    ),
}


def benchmark_names() -> list[str]:
    return list(BENCHMARKS)


def sample_names() -> list[str]:
    """Names usable as `sample:<name>`: the shipped sample files."""
    return sorted(p.stem for p in DATA_DIR.glob("*.jsonl"))


def _first(row: dict[str, Any], keys: Iterable[str]) -> str | None:
    return next((k for k in keys if row.get(k) not in (None, "", [])), None)


def _problem_from_row(
    row: dict[str, Any], spec: BenchmarkSpec | None, source: str, index: int
) -> MathProblem:
    """Map one row to a MathProblem with `spec`'s fields, or the common keys when None."""
    if spec is not None:
        problem_key: str | None = spec.problem_field
        answer_key: str | None = spec.answer_field
        form, id_key = spec.answer_form, spec.id_field
    else:
        problem_key, answer_key = _first(row, PROBLEM_KEYS), _first(row, ANSWER_KEYS)
        answer_key = answer_key or _first(row, SOLUTION_KEYS)
        form, id_key = "auto", _first(row, ID_KEYS)
    if problem_key not in row or answer_key not in row:
        raise ValueError(
            f"{source} row {index}: need a problem field ({problem_key or ' / '.join(PROBLEM_KEYS)})"
            f" and an answer field ({answer_key or ' / '.join(ANSWER_KEYS + SOLUTION_KEYS)});"
            f" the row has {sorted(row)}"
        )
    try:
        answer = ANSWER_FORMS[form](row[answer_key])
    except ValueError as exc:
        raise ValueError(f"{source} row {index}: {exc}") from exc
    raw_id = row.get(id_key) if id_key else None
    problem_id = str(raw_id) if raw_id not in (None, "") else f"{source}-{index}"
    return MathProblem(problem_id, str(row[problem_key]).strip(), answer, source)


def _read_rows(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        data = json.loads(text)
        rows = data if isinstance(data, list) else data.get("data", data.get("rows"))
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{path}: expected JSON objects, one per line (.jsonl) or a list (.json)")
    return rows


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    files = sorted(p for p in path.iterdir() if p.suffix in (".jsonl", ".json"))
    if not files:
        raise FileNotFoundError(f"{path} holds no .jsonl or .json files")
    return files


def _load_local(path: Path, spec: BenchmarkSpec | None, source: str) -> list[MathProblem]:
    problems: list[MathProblem] = []
    for file in _files(path):
        name = source if path.is_file() else f"{source}/{file.stem}"
        rows = _read_rows(file)
        problems.extend(_problem_from_row(r, spec, name, i) for i, r in enumerate(rows))
    return problems


def _load_hub(name: str) -> list[MathProblem]:
    spec = BENCHMARKS.get(name)
    try:
        import datasets
    except ImportError as exc:
        raise ImportError(
            f"loading {name!r} from the Hugging Face hub needs `datasets` "
            "(pip install 'spiral-selfplay[math]'); or pass a local .jsonl file or "
            f"'sample:<name>' ({', '.join(sample_names())})"
        ) from exc
    hub_id = spec.hub_id if spec else name
    configs = spec.configs if spec else (None,)
    rows: list[dict[str, Any]] = []
    for config in configs:
        try:
            split = spec.split if spec else "test"
            rows.extend(datasets.load_dataset(hub_id, config, split=split))
        except Exception as exc:  # offline, unknown id, gated: all need the same advice
            raise RuntimeError(
                f"could not load {hub_id!r} (config {config}) from the Hugging Face hub: {exc}. "
                "Offline? Download it elsewhere and pass the local .jsonl/.json file or folder, "
                f"or use a shipped sample: {', '.join(SAMPLE_PREFIX + n for n in sample_names())}"
            ) from exc
    return [_problem_from_row(r, spec, name, i) for i, r in enumerate(rows)]


def math_source_problem(name_or_path: str) -> str:
    """Why `name_or_path` cannot name math problems, or "" when it can (checked before
    any model loads; the hub is only asked later, by `load_math`)."""
    if name_or_path.startswith(SAMPLE_PREFIX):
        name = name_or_path.removeprefix(SAMPLE_PREFIX)
        if not (DATA_DIR / f"{name}.jsonl").is_file():
            return f"no shipped sample {name!r}; valid: {', '.join(sample_names())}"
        return ""
    if Path(name_or_path).exists() or name_or_path in BENCHMARKS:
        return ""
    if re.fullmatch(r"[\w.-]+/[\w.-]+", name_or_path):
        return ""
    return (
        f"{name_or_path!r} is not a file, a folder, 'sample:<name>' "
        f"({', '.join(sample_names())}), a benchmark ({', '.join(BENCHMARKS)}) "
        "or a hub id (owner/name)"
    )


def load_math(name_or_path: str, limit: int | None = None, seed: int = 0) -> list[MathProblem]:
    """Problems from a shipped sample ("sample:gsm8k"), a local file or folder, or the hub."""
    if name_or_path.startswith(SAMPLE_PREFIX):
        name = name_or_path.removeprefix(SAMPLE_PREFIX)
        file = DATA_DIR / f"{name}.jsonl"
        if not file.is_file():
            raise FileNotFoundError(
                f"no shipped sample {name!r}; valid: {', '.join(sample_names())}"
            )
        problems = _load_local(file, BENCHMARKS.get(name), name_or_path)
    elif Path(name_or_path).exists():
        problems = _load_local(Path(name_or_path), None, Path(name_or_path).stem)
    elif name_or_path in BENCHMARKS or re.fullmatch(r"[\w.-]+/[\w.-]+", name_or_path):
        problems = _load_hub(name_or_path)
    else:
        raise FileNotFoundError(
            f"{name_or_path!r} is not a file, a folder, 'sample:<name>' "
            f"({', '.join(sample_names())}), a benchmark ({', '.join(BENCHMARKS)}) "
            "or a hub id (owner/name)"
        )
    if not problems:
        raise ValueError(f"{name_or_path!r} holds no problems")
    return _subset(problems, limit, seed)


def _subset(problems: list[MathProblem], limit: int | None, seed: int) -> list[MathProblem]:
    if limit is None or limit >= len(problems):
        return problems
    if limit < 1:
        raise ValueError(f"limit must be at least 1 (or None for all), got {limit}")
    keep = sorted(random.Random(seed).sample(range(len(problems)), limit))
    return [problems[i] for i in keep]
