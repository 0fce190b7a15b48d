"""The claims on `make train` on each CPU class: wall time of the whole command, peak
resident memory of any step, and exact exploitability at step 120, one folder a class."""

from __future__ import annotations

import statistics
from typing import Any

from .core import Check, NoData, Row, claim, f, mean_sd, span, verdict
from .engine import elapsed_min, peak_gb_of
from .kuhn import seed_range

CLASSES = "docs/results/make-train-cpu-classes"
BAND = (0.122, 0.026)  # the preset's five seeds on the AVX512-BF16 CPU (mean, sd)


def runs(row: Row, cpu_class: str) -> list[str]:
    """The seeds' file stems of one class (`seedS`), each with metrics, config and time."""
    metrics = row.glob(f"{CLASSES}/{cpu_class}", "seed*.metrics.jsonl")
    return [m[: -len(".metrics.jsonl")] for m in metrics]


def minutes(row: Row, stems: list[str]) -> list[float]:
    return [elapsed_min(row.text(f"{s}.time"))[1] / 60 for s in stems]


def alone(row: Row, stems: list[str]) -> list[str]:
    """The runs that had the machine to themselves (`runs.json` names the others): only
    their wall time is the command's."""
    contended = row.json(f"{CLASSES}/runs.json")["contended"]
    quiet = [s for s in stems if s.split(f"{CLASSES}/", 1)[1] not in contended]
    if not quiet:
        raise NoData("every run shared the machine: no wall time to state")
    return quiet


def peak_gb(row: Row, stem: str) -> float:
    return peak_gb_of(row.metrics(f"{stem}.metrics.jsonl"), f"{stem}.metrics.jsonl")


def step_seconds(row: Row, stem: str) -> float:
    """Median seconds of a step (time/total), evaluations left out."""
    rows = row.metrics(f"{stem}.metrics.jsonl")
    totals = sorted(r["time/total"] for r in rows if "time/total" in r)
    return totals[len(totals) // 2]


def class_checks(row: Row, cpu_class: str) -> list[Check]:
    stems = runs(row, cpu_class)
    mins = minutes(row, alone(row, stems))
    peaks = [peak_gb(row, s) for s in stems]
    live = [row.final(f"{s}.metrics.jsonl") for s in stems]
    start = [row.evals(f"{s}.metrics.jsonl")[0] for s in stems]
    seeds = [int(row.config(f"{s}.config.json")["seed"]) for s in stems]
    return [
        Check("minutes", f"{span(mins, 1)} min"),
        Check("peak memory", f"{span(peaks, 2)} GB"),
        Check("median step", f"{span([step_seconds(row, s) for s in alone(row, stems)], 1)} s"),
        Check("base model", span(start), "claim"),
        *(
            [Check("exploitability", mean_sd(live)), Check("range", f"range {span(live)}")]
            if len(live) > 1
            else [Check("exploitability", f(live[0]))]
        ),
        Check("n", f"n = {len(live)}"),
        Check("seeds", seed_range(seeds) if len(seeds) > 1 else f"seed {seeds[0]}"),
        Check("targets (not data)", "<= 30 min and <= 3.5 GB", "claim"),
    ]


@claim("make train on a CPU without AVX-512")
def capped(row: Row) -> list[Check]:
    mean, sd = BAND
    return [
        *class_checks(row, "avx2"),
        Check("target band (the preset's five seeds)", f"{f(mean)} ± {f(sd)}", "claim"),
        memory_target([peak_gb(row, s) for s in runs(row, "avx2")]),
    ]


def memory_target(peaks: list[float]) -> Check:
    return verdict("memory target: <= 3.5 GB", max(peaks) <= 3.5, "(memory target {})")


@claim("make train on a CPU with AVX512-BF16")
def native(row: Row) -> list[Check]:
    return class_checks(row, "native")


@claim("the learner's call of a make train step under the AVX2 cap")
def capped_learner(row: Row) -> list[Check]:
    before = row.json(f"{CLASSES}/profile/capped-before-tree-tails.json")
    after = row.json(f"{CLASSES}/profile/capped.json")
    native_after = row.json(f"{CLASSES}/profile/native.json")
    return [
        Check("magnet recomputed", f"{f(before['learn/kl_s'], 2)} s"),
        Check("magnet kept", f"{f(before['learn/kl_kept_s'], 2)} s"),
        Check("and tree tails", f"{f(after['learn/kl_kept_s'], 2)} s"),
        Check("without the cap", f"{f(native_after['learn/kl_kept_s'], 2)} s"),
        Check("matrix products", f"{round(100 * after['learn/top_ops_share']['aten::mm'])}%"),
    ]


def _same_numbers(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Every metric but times and memory equal, row by row."""
    timed = ("time", "perf/")
    return len(a) == len(b) and all(
        {k: v for k, v in x.items() if not k.startswith(timed)}
        == {k: v for k, v in y.items() if not k.startswith(timed)}
        for x, y in zip(a, b, strict=True)
    )


@claim("make train under the AVX2 cap with glibc's mmap threshold at 1 MiB")
def capped_small_heap(row: Row) -> list[Check]:
    ab = f"{CLASSES}/allocator-ab"
    default, small = (
        row.metrics(f"{ab}/{name}.metrics.jsonl") for name in ("default", "mmap-1mib")
    )
    if not _same_numbers(default, small):
        raise NoData("the allocator runs differ in a metric other than time or memory")

    def learner_s(rows: list[dict[str, Any]]) -> float:  # steps 2-9: past the warm-up
        return statistics.median(
            r["time/train"] for r in rows if "time/train" in r and r["step"] >= 2
        )

    stems = runs(row, "avx2-mmap-1mib")
    live = [row.final(f"{s}.metrics.jsonl") for s in stems]
    both = [row.final(f"{s}.metrics.jsonl") for s in runs(row, "avx2")] + live
    return [
        Check("peak, 10 steps, default", f"{span([peak_gb_of(default)], 2)} GB"),
        Check("peak, 10 steps, 1 MiB", f"{span([peak_gb_of(small)], 2)} GB"),
        Check("learner, default", f"{f(learner_s(default), 1)} s"),
        Check("learner, 1 MiB", f"{f(learner_s(small), 1)} s"),
        Check("slower", f"{f(learner_s(small) / learner_s(default), 2)}x"),
        Check("peak, 120 steps", f"{span([peak_gb(row, s) for s in stems], 2)} GB"),
        memory_target([peak_gb(row, s) for s in stems]),
        Check("exploitability", span(live)),
        Check("with the default allocator's seeds", mean_sd(both)),
        Check("n", f"n = {len(both)}"),
    ]
