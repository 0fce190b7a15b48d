"""Math benchmarks as a measure of reasoning transfer, as in the original SPIRAL
(docs/math-eval.md).

`evaluate_math(sampler, tokenizer, problems, name)` renders each problem with a prompt
template (default `qwen3_general`: "Question: {problem}" plus "Please reason step by step,
and put your final answer within \\boxed{}."), samples one response per problem in
batches, takes the last `\\boxed{}` of the response and grades it with math-verify
(`spiral.evaluation.mathbench.grading`). It returns a `MathReport`: one record per problem and the
metrics `math/<name>/{accuracy, accuracy_low, accuracy_high, mean_response_tokens,
truncated_rate}` (accuracy with its 95% Wilson interval). `run_math_benchmarks` loads and
evaluates several benchmarks and adds `math/average/accuracy` (the unweighted mean).

Choices:
- Greedy by default (temperature 0), like the original's standalone math eval. We pass
  `temperature=0.0` to the sampler unchanged: the Sampler protocol leaves T=0 to the
  backend, and our samplers decode greedily (argmax) at T=0 rather than dividing by it.
  `seed` + the batch's first index seeds each batch, so sampled runs (T>0) repeat.
- One response per problem (pass@1). The original's offline harness averaged 4 samples
  at T=0.6; run with `temperature=0.6` and several seeds to reproduce that.
- A response with no `\\boxed{}` is wrong (no fallback to the whole text: a number in
  the reasoning is not an answer). A response cut at `max_tokens` is recorded as
  truncated and graded like any other (it usually has no box).
- Prompt ids come from `spiral.prompts.render.encode`, the same encoding games use.
- Response length is `len(completion.tokens)`, as the sampler reports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spiral.engines.base import Sampler, SamplingParams
from spiral.evaluation.intervals import wilson_interval
from spiral.evaluation.mathbench.data import (
    BENCHMARKS,
    SAMPLE_PREFIX,
    MathProblem,
    load_math,
)
from spiral.evaluation.mathbench.grading import grade
from spiral.prompts.extract import extract_boxed
from spiral.prompts.render import encode
from spiral.prompts.templates import BOXED_INSTRUCTION, render


@dataclass(frozen=True)
class MathRecord:
    """One problem's outcome."""

    id: str
    response: str
    answer: str | None  # the extracted \boxed{} content, None if there was none
    gold: str
    correct: bool
    response_tokens: int
    truncated: bool  # stopped by max_tokens


@dataclass(frozen=True)
class MathReport:
    """All records of one benchmark run and the metrics derived from them."""

    name: str
    records: tuple[MathRecord, ...]

    def __post_init__(self) -> None:
        if not self.records:
            raise ValueError(f"math report {self.name!r} has no records")

    @property
    def n(self) -> int:
        return len(self.records)

    @property
    def correct(self) -> int:
        return sum(r.correct for r in self.records)

    @property
    def accuracy(self) -> float:
        return self.correct / self.n

    @property
    def accuracy_interval(self) -> tuple[float, float]:
        return wilson_interval(self.correct, self.n)

    @property
    def mean_response_tokens(self) -> float:
        return sum(r.response_tokens for r in self.records) / self.n

    @property
    def truncated_rate(self) -> float:
        return sum(r.truncated for r in self.records) / self.n

    def to_dict(self) -> dict[str, float]:
        """The metrics, keyed `math/<name>/<metric>`."""
        low, high = self.accuracy_interval
        key = f"math/{self.name}"
        return {
            f"{key}/accuracy": self.accuracy,
            f"{key}/accuracy_low": low,
            f"{key}/accuracy_high": high,
            f"{key}/mean_response_tokens": self.mean_response_tokens,
            f"{key}/truncated_rate": self.truncated_rate,
        }

    def table(self, max_rows: int = 50) -> str:
        """A plain-text table: one row per problem (the first `max_rows`), then a summary."""
        header = f"{'id':<32} {'ok':<3} {'tokens':>6} {'cut':<3} {'answer':<20} gold"
        lines = [header, "-" * len(header)]
        for r in self.records[:max_rows]:
            answer = "-" if r.answer is None else r.answer.replace("\n", " ")
            lines.append(
                f"{r.id[-32:]:<32} {'Y' if r.correct else '.':<3} {r.response_tokens:>6} "
                f"{'Y' if r.truncated else '.':<3} {answer[:20]:<20} {r.gold[:30]}"
            )
        if self.n > max_rows:
            lines.append(f"... {self.n - max_rows} more")
        low, high = self.accuracy_interval
        lines.append(
            f"{self.name}: accuracy {self.accuracy:.3f} [{low:.3f}, {high:.3f}] "
            f"({self.correct}/{self.n}), mean response {self.mean_response_tokens:.1f} tokens, "
            f"truncated {self.truncated_rate:.1%}"
        )
        return "\n".join(lines)


def _record(problem: MathProblem, completion: Any, grade_timeout_s: float) -> MathRecord:
    answer = extract_boxed(completion.text)
    return MathRecord(
        id=problem.id,
        response=completion.text,
        answer=answer,
        gold=problem.answer,
        correct=grade(answer, problem.answer, timeout_s=grade_timeout_s),
        response_tokens=len(completion.tokens),
        truncated=completion.stop_reason == "length",
    )


def evaluate_math(
    sampler: Sampler,
    tokenizer: Any,
    problems: Sequence[MathProblem],
    name: str,
    max_tokens: int = 1024,
    temperature: float = 0.0,
    template: str = "qwen3_general",
    batch_size: int = 16,
    seed: int = 0,
    grade_timeout_s: float = 5.0,
) -> MathReport:
    """Sample one response per problem and grade its last \\boxed{} answer."""
    if not problems:
        raise ValueError(f"no problems to evaluate for {name!r}")
    if batch_size < 1 or max_tokens < 1:
        raise ValueError(f"batch_size and max_tokens must be >= 1, got {batch_size}, {max_tokens}")
    records: list[MathRecord] = []
    for start in range(0, len(problems), batch_size):
        batch = problems[start : start + batch_size]
        prompts = [
            encode(render(template, p.problem, BOXED_INSTRUCTION, tokenizer=tokenizer), tokenizer)
            for p in batch
        ]
        params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed + start)
        completions = sampler.sample(prompts, params)
        if len(completions) != len(batch):
            raise RuntimeError(
                f"sampler returned {len(completions)} completions for {len(batch)} prompts"
            )
        records.extend(
            _record(p, c, grade_timeout_s) for p, c in zip(batch, completions, strict=True)
        )
    return MathReport(name=name, records=tuple(records))


def benchmark_label(name_or_path: str) -> str:
    """The `<name>` in metric keys: registered names as they are, `sample:gsm8k` ->
    `sample_gsm8k`, a file or folder -> its stem, a hub id `owner/x` -> `owner_x`."""
    if name_or_path in BENCHMARKS:
        return name_or_path
    if name_or_path.startswith(SAMPLE_PREFIX):
        return "sample_" + name_or_path.removeprefix(SAMPLE_PREFIX)
    if Path(name_or_path).exists():
        return Path(name_or_path).stem
    return name_or_path.replace("/", "_")


def run_math_benchmarks(
    sampler: Sampler,
    tokenizer: Any,
    names: list[str],
    limit: int | None = None,
    **kw: Any,
) -> dict[str, float]:
    """Load each benchmark (see `load_math`; at most `limit` problems, seeded by `seed`),
    evaluate it, and merge the metrics; `kw` goes to `evaluate_math`."""
    if not names:
        raise ValueError("no math benchmarks named; e.g. names=['math500'] or ['sample:gsm8k']")
    metrics: dict[str, float] = {}
    accuracies: list[float] = []
    for name in names:
        problems = load_math(name, limit=limit, seed=kw.get("seed", 0))
        report = evaluate_math(sampler, tokenizer, problems, benchmark_label(name), **kw)
        metrics.update(report.to_dict())
        accuracies.append(report.accuracy)
    metrics["math/average/accuracy"] = sum(accuracies) / len(accuracies)
    return metrics
