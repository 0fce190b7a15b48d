"""The claims on learning Kuhn poker: exact exploitability at the end of each run (step
200 for `make train` since it trains on the whole tree, step 120 before)."""

from __future__ import annotations

import statistics

from spiral.args import flat_json
from spiral.train.recipes import RECIPES

from .core import AVERAGED, LIVE, Check, NoData, Row, claim, f, mean_sd, span, verdict, words
from .engine import elapsed_min, peak_gb_of

# `make train` since 2026-12-07: full width, its seeds on the AVX2 CPU.
FULL_WIDTH = "docs/results/kuhn-full-width/seeds"
FULL_WIDTH_STEPS = 200
# The sampled preset before it (the centering fade and a 0.1 move floor, 2026-11-30 to
# 2026-12-06): bf16 on the AVX512-BF16 CPU, and fp32 on the AVX2 CPU; before the floor, the
# fade alone (bf16).
SAMPLED_FLOOR = (0.1, 0.2)  # its move_floor, move_floor_coef
SAMPLED = "the sampled preset with its move floor"
PRESET_RUNS = [
    f"docs/results/kuhn-centering/move-floor-bf16/seed{s}/metrics.jsonl" for s in range(5)
]
FLOOR = "docs/results/kuhn-centering/move-floor"
FLOOR_RUNS = [f"{FLOOR}/seed{s}/metrics.jsonl" for s in range(5)]
FADE = [f"docs/results/kuhn-centering/fade/seed{s}.metrics.jsonl" for s in range(5)]
BEFORE_FLOOR = "the preset before its move floor"
# Every run of the preset before the centering fade that has its metrics file.
BEFORE_FADE = [
    "docs/results/kuhn-make-train/metrics.jsonl",
    "docs/results/kuhn-make-train-2026-11-26/metrics.jsonl",
    "docs/results/kuhn-precision/fp32-before.metrics.jsonl",
    "docs/results/kuhn-precision/bf16-after.metrics.jsonl",
    "docs/results/make-train-side-by-side/before.metrics.jsonl",
    "docs/results/make-train-side-by-side/after.metrics.jsonl",
    "docs/results/kuhn-async/sync-is-seed1.metrics.jsonl",
    "docs/results/kuhn-async/sync-is-seed2.metrics.jsonl",
    "docs/results/kuhn-async/sync-is-seed3.metrics.jsonl",
    "docs/results/kuhn-two-phase/p5-seed0.metrics.jsonl",
]
ASYNC = "docs/results/kuhn-async"


def config_of(metrics: str) -> str:
    """The config file beside a metrics file (NAME.metrics.jsonl or a run's metrics.jsonl)."""
    if metrics.endswith("/metrics.jsonl"):
        return metrics[: -len("metrics.jsonl")] + "config.json"
    return metrics[: -len(".metrics.jsonl")] + ".config.json"


def seeds(row: Row, files: list[str]) -> list[int]:
    return [int(row.config(config_of(m))["seed"]) for m in files]


def seed_range(values: list[int]) -> str:
    s = sorted(set(values))
    return (
        f"seeds {s[0]}-{s[-1]}"
        if s == list(range(s[0], s[-1] + 1))
        else "seeds " + ", ".join(map(str, s))
    )


def finals(row: Row, files: list[str], key: str = LIVE) -> list[float]:
    return [row.final(m, key) for m in files]


def stats(label: str, xs: list[float]) -> list[Check]:
    """mean ± sd, range and n of runs, as the rows write them."""
    return [
        Check(f"{label}: mean ± sd", mean_sd(xs)),
        Check(f"{label}: range", span(xs)),
        Check(f"{label}: n", f"n = {len(xs)}"),
    ]


def before_fade_finals(row: Row, key: str = LIVE) -> list[float]:
    """The preset before the fade, at step 120, read through its own row."""
    return finals(row.row("the preset before the centering fade"), BEFORE_FADE, key)


def full_width_runs(row: Row) -> list[str]:
    """`make train`'s runs, each checked to hold today's recipe (its keys but the seed and
    the run folder)."""
    runs = row.glob(FULL_WIDTH, "seed*/metrics.jsonl")
    today = flat_json(RECIPES["embedded-kuhn"]())
    for m in runs:
        ran = row.config(config_of(m))
        changed = sorted(
            k for k in today if k not in ("seed", "log_path", "recipe") and ran.get(k) != today[k]
        )
        if changed:
            raise NoData(f"{m} ran with other keys than the recipe: {', '.join(changed)}")
    return runs


NATIVE = "make train natively on a 2-core AVX2 CPU"


def timed_runs(row: Row) -> tuple[list[str], list[str]]:
    """(every seed folder of `make train` with GNU time's report, those that had the
    machine alone); `contended.json` names the others and why."""
    timed = [t.removesuffix("/time") for t in row.glob(FULL_WIDTH, "seed*/time")]
    contended = row.json(f"{FULL_WIDTH}/contended.json")
    alone = [t for t in timed if t.rsplit("/", 1)[1] not in contended]
    if not alone:
        raise NoData("every timed run shared the machine: no wall time to state")
    return timed, alone


def wall_minutes(row: Row, folder: str) -> float:
    return elapsed_min(row.text(f"{folder}/time"))[1] / 60


def peak_gb(row: Row, folder: str) -> float:
    return peak_gb_of(row.metrics(f"{folder}/metrics.jsonl"), f"{folder}/metrics.jsonl")


def median_step(row: Row, folder: str) -> float:
    return statistics.median(
        r["time/total"] for r in row.metrics(f"{folder}/metrics.jsonl") if "time/total" in r
    )


@claim(NATIVE)
def native_time(row: Row) -> list[Check]:
    timed, alone = timed_runs(row)
    return [
        Check("minutes", f"{span([wall_minutes(row, t) for t in alone], 1)} min"),
        Check("median step", f"{span([median_step(row, t) for t in alone], 1)} s"),
        Check("peak", f"peak {span([peak_gb(row, t) for t in timed], 2)} GB"),
        Check("alone", f"seed {', '.join(t.rsplit('seed', 1)[1] for t in alone)} alone"),
        Check("targets (not data)", "<= 30 min", "claim"),
    ]


NATIVE_BF16 = "make train natively on a 2-core AVX512-BF16 CPU"
BF16_RUN = "docs/results/kuhn-full-width/native-avx512-bf16"


def bf16_native(row: Row) -> dict[str, float]:
    """The bf16 run's cost and end, beside the fp32 seed 0 on the AVX2 CPU."""
    metrics, fp32 = f"{BF16_RUN}/metrics.jsonl", f"{FULL_WIDTH}/seed0/metrics.jsonl"
    return {
        "minutes": wall_minutes(row, BF16_RUN),
        "step": median_step(row, BF16_RUN),
        "peak": peak_gb(row, BF16_RUN),
        "live": row.final(metrics, LIVE, step=FULL_WIDTH_STEPS),
        "averaged": row.final(metrics, AVERAGED, step=FULL_WIDTH_STEPS),
        "fp32 live": row.final(fp32, LIVE, step=FULL_WIDTH_STEPS),
        "fp32 averaged": row.final(fp32, AVERAGED, step=FULL_WIDTH_STEPS),
    }


@claim(NATIVE_BF16)
def native_bf16_time(row: Row) -> list[Check]:
    got = bf16_native(row)
    return [
        Check("minutes", f"{got['minutes']:.1f} min"),
        Check("median step", f"{got['step']:.1f} s"),
        Check("peak", f"peak {got['peak']:.2f} GB"),
        Check("end", f"live {f(got['live'])}, averaged {f(got['averaged'])}"),
        Check("fp32 seed 0", f"{f(got['fp32 live'])}, {f(got['fp32 averaged'])}"),
        verdict("<= 30 min (the target)", got["minutes"] <= 30, "time target {}"),
        Check("targets (not data)", "<= 30 min", "claim"),
    ]


@claim("make train lowers Kuhn exploitability")
def make_train(row: Row) -> list[Check]:
    runs = full_width_runs(row)
    live = [row.final(m, step=FULL_WIDTH_STEPS) for m in runs]
    averaged = [row.final(m, AVERAGED, FULL_WIDTH_STEPS) for m in runs]
    start = [row.evals(m)[0] for m in runs]
    return [
        Check("base model at step 0", span(start), "claim"),
        *stats("live", live),
        Check("seeds", seed_range(seeds(row, runs))),
        Check("averaged weights", f"averaged weights {mean_sd(averaged)}"),
        Check("mixture", f"the mixture of checkpoints 100-200 {mean_sd(mixtures(row, runs))}"),
        Check(
            "at or below 0.05", f"{sum(x <= 0.05 for x in live)} of {len(live)} at or below 0.05"
        ),
    ]


MIXTURES = "docs/results/kuhn-full-width/mixture"


def mixtures(row: Row, runs: list[str]) -> list[float]:
    """Each seed's exact exploitability of the mixture of its checkpoints 100-200 (the
    `spiral eval weights=mixture` report), checked to be that run's checkpoints."""
    out = []
    for m in runs:
        seed = int(row.config(config_of(m))["seed"])
        report = row.json(f"{MIXTURES}/seed{seed}-mixture.json")
        steps = [int(p.rsplit("step_", 1)[1]) for p in report["candidate"]["members"]]
        if steps != list(range(100, FULL_WIDTH_STEPS + 1, 20)):
            raise NoData(f"seed {seed}'s mixture holds steps {steps}, not 100-200")
        out.append(report["exploitability"]["KuhnPokerSingle-v0"]["exploitability"])
    return out


@claim(SAMPLED)
def sampled_preset(row: Row) -> list[Check]:
    live, averaged = finals(row, PRESET_RUNS), finals(row, PRESET_RUNS, AVERAGED)
    start = [row.evals(m)[0] for m in PRESET_RUNS + FLOOR_RUNS]
    fp32 = finals(row, FLOOR_RUNS)
    for m in PRESET_RUNS + FLOOR_RUNS:
        cfg = row.config(config_of(m))
        if (cfg.get("move_floor"), cfg.get("move_floor_coef")) != SAMPLED_FLOOR:
            raise NoData(f"{m} ran without the sampled preset's move floor")
    return [
        Check("base model at step 0", span(start), "claim"),
        *stats("live", live),
        Check("seeds", seed_range(seeds(row, PRESET_RUNS))),
        Check("averaged weights", f"averaged weights {mean_sd(averaged)}"),
        Check("fp32", f"fp32: {mean_sd(fp32)}, range {span(fp32)}, n = {len(fp32)}"),
    ]


@claim(BEFORE_FLOOR)
def before_floor(row: Row) -> list[Check]:
    live, averaged = finals(row, FADE), finals(row, FADE, AVERAGED)
    return [
        *stats("live", live),
        Check("seeds", seed_range(seeds(row, FADE))),
        Check("averaged weights", f"averaged weights {mean_sd(averaged)}"),
    ]


@claim("the preset before the centering fade")
def before_fade(row: Row) -> list[Check]:
    for m in BEFORE_FADE:
        if row.config(config_of(m)).get("private_centering"):
            raise NoData(f"{m} ran with private_centering: not the preset before the fade")
    live, runs = finals(row, BEFORE_FADE), seeds(row, BEFORE_FADE)
    return [
        *stats("live", live),
        Check("seeds", seed_range(runs)),
        Check("runs of seed 0", f"seed 0 run {words(runs.count(0))} times"),
    ]


@claim("the averaged weights of the runs before the fade")
def before_fade_averaged(row: Row) -> list[Check]:
    live, averaged = finals(row, BEFORE_FADE), finals(row, BEFORE_FADE, AVERAGED)
    n = len(averaged)
    return [
        *stats("averaged", averaged),
        Check(
            "averaged at or below 0.10",
            f"at or below 0.10 in {sum(x <= 0.10 for x in averaged)} of {n}",
        ),
        Check("live at or below 0.10", f"live: {sum(x <= 0.10 for x in live)} of {n}"),
    ]


@claim("the average of a run's evaluated policies")
def iterate_average(row: Row) -> list[Check]:
    runs = row.metrics("docs/results/kuhn-iterate-average/runs.jsonl")
    checks = []
    for label, column in (("all", "average of policies"), ("later half", "average, later half")):
        xs = [r[column] for r in runs]
        checks += [Check(f"{label}: mean ± sd", mean_sd(xs)), Check(f"{label}: range", span(xs))]
    live = [r["live"] for r in runs]
    checks += [Check("live", f"live {mean_sd(live)}, n = {len(live)}")]
    lower = [r for r in runs if r["average of policies"] < r["live"]]
    checks.append(Check("runs where it is lower", f"in {len(lower)} of {len(runs)} runs"))
    for r in lower:
        checks.append(
            Check(f"lower: {r['run']}", f"{f(r['live'])} -> {f(r['average of policies'])}")
        )
    return checks


@claim("in the exact tabular twin of the update")
def tabular_twin(row: Row) -> list[Check]:
    runs = row.metrics("docs/results/kuhn-tabular-twin/runs.jsonl")

    def pick(eta: float, interval: object, regularised: bool = True) -> list[dict]:
        return [
            r
            for r in runs
            if r["eta"] == eta
            and (interval is None or r["interval"] == interval)
            and (r["tau"] > 0) == regularised
        ]

    last, top, half = (
        "final_exploitability",
        "max_exploitability_last_quarter",
        "second_half_average_exploitability",
    )
    (fresh,) = pick(10.0, 1)
    held = pick(10.0, 10) + pick(10.0, 100)
    (converged,) = pick(10.0, "converged")
    step1 = [r for r in pick(1.0, None) if r["interval"] in (1, 10, 100)]
    free = [r for r in runs if r["tau"] == 0 and r["lam"] == 0]
    return [
        Check(
            "step 10, refreshed every update", f"every update {f(fresh[last])} (max {f(fresh[top])}"
        ),
        Check("step 10, held 10-100", f"every 10 or 100 updates {span([r[last] for r in held])}"),
        Check("step 10, held until the KL stops", f'stops moving" {f(converged[last])}'),
        Check("step 1, up to 100", f"step 1: {span([r[last] for r in step1])} for every interval"),
        Check("step 30", f"all cycle ({span([r[last] for r in pick(30.0, None)], 2)})"),
        Check("no regulariser, last", f"last iterate {span([r[last] for r in free], 2)}"),
        Check("no regulariser, max", f"(max {span([r[top] for r in free], 2)})"),
        Check("no regulariser, half", f"second-half average {span([r[half] for r in free])}"),
    ]


SAMPLED_BESIDE = "the recipe's keys with sampled games"
SAMPLED_SEEDS = "docs/results/kuhn-full-width/sampled-seeds"


def sampled_beside_full_width(row: Row) -> dict[str, list[float]]:
    """Step-200 live and averaged exploitability of every sampled seed and of the same
    seeds with full width."""
    runs = [
        p.removesuffix("/metrics.jsonl") for p in row.glob(SAMPLED_SEEDS, "seed*/metrics.jsonl")
    ]
    names = [r.rsplit("/", 1)[1] for r in runs]
    twins = [f"{FULL_WIDTH}/{n}" for n in names]
    out: dict[str, list[float]] = {"seeds": [float(n.removeprefix("seed")) for n in names]}
    for label, folders in (("sampled", runs), ("full width", twins)):
        for key, which in (("live", LIVE), ("averaged", AVERAGED)):
            out[f"{label} {key}"] = [
                row.final(f"{r}/metrics.jsonl", which, step=FULL_WIDTH_STEPS) for r in folders
            ]
    return out


@claim(SAMPLED_BESIDE)
def sampled_beside(row: Row) -> list[Check]:
    got = sampled_beside_full_width(row)
    seeds = ", ".join(str(int(s)) for s in got["seeds"])
    checks = [Check("seeds", f"seed{'s' if len(got['seeds']) > 1 else ''} {seeds}")]
    for label in ("sampled", "full width"):
        live, avg = got[f"{label} live"], got[f"{label} averaged"]
        checks.append(
            Check(
                label, f"{label} {', '.join(f(x) for x in live)} ({', '.join(f(x) for x in avg)})"
            )
        )
    gap = [s - w for s, w in zip(got["sampled live"], got["full width live"], strict=True)]
    checks.append(Check("sampling's cost", f"{', '.join(f'{x:+.3f}' for x in gap)}"))
    return checks
