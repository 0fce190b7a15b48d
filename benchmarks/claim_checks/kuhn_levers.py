"""The claims on what was tried on top of the Kuhn preset: centering, a trust region,
population play and the async actor-learner; each against the runs it is compared with."""

from __future__ import annotations

from .core import AVERAGED, POOL, Check, Row, claim, f, mean_sd, span, verdict, words
from .kuhn import (
    ASYNC,
    BEFORE_FADE,
    BEFORE_FLOOR,
    FADE,
    FLOOR,
    FLOOR_RUNS,
    before_fade_finals,
    config_of,
    finals,
    seed_range,
    seeds,
    stats,
)

CENTERING = "docs/results/kuhn-centering"
PRIORITISED = [
    f"docs/results/kuhn-fsp-prioritised/variance-frac50-seed{s}.metrics.jsonl" for s in range(3)
]
# The preset's bf16 runs of seeds 0-2 on the latest code before the fade (seed 0: the
# fresh-clone run), the "plain self-play" the population arms are set beside.
PLAIN_0_2 = [
    BEFORE_FADE[1],
    f"{ASYNC}/sync-is-seed1.metrics.jsonl",
    f"{ASYNC}/sync-is-seed2.metrics.jsonl",
]
PRESET = "the preset before the centering fade"


def listed(xs: list[float]) -> str:
    return ", ".join(f(x) for x in xs)


def below_at_40(row: Row, files: list[str]) -> int:
    return sum(row.evals(m)[40] < 0.2 for m in files)


def preset_at_40(row: Row) -> list[Check]:
    """How many of the preset's runs were below 0.2 at step 40: seed 0, and seeds 1-3."""
    preset = row.row(PRESET)
    by_seed = dict(zip(BEFORE_FADE, seeds(preset, BEFORE_FADE), strict=True))
    seed0 = [m for m, s in by_seed.items() if s == 0]
    others = [m for m, s in by_seed.items() if s in (1, 2, 3)]
    n_others = below_at_40(preset, others)
    return [
        Check(
            "the preset's seed 0, below 0.2 at 40",
            f"seed 0 in {below_at_40(preset, seed0)} of its {len(seed0)} runs",
        ),
        Check(
            "the preset's seeds 1-3, below 0.2 at 40",
            f"seeds 1-3 in {n_others or 'none'} of theirs",
        ),
    ]


def twin_end(row: Row) -> list[Check]:
    """The shared-parameter twin at cosine 0.995 and lr 0.1: centred (pg) against none."""
    runs = [
        r
        for r in row.metrics(f"{CENTERING}/twin/runs.jsonl")
        if r["eps"] == 0.07 and r["lr"] == 0.1
    ]
    ends: dict[float | None, list[float]] = {}
    for r in runs:
        ends.setdefault(r["beta"] if r["mode"] == "pg" else None, []).append(
            r["final_exploitability"]
        )
    centred = [sum(xs) / len(xs) for beta, xs in ends.items() if beta]
    plain = ends[0.0]
    return [
        Check("twin setting", f"(cosine {runs[0]['cosine']:.3f}, lr {runs[0]['lr']:g})"),
        Check("twin ends", f"end {span(centred)} vs {f(sum(plain) / len(plain))}"),
    ]


def target(live: list[float], text: str) -> Check:
    """The Kuhn levers' target, judged on the seeds' live exploitability at the end."""
    met = sum(live) / len(live) <= 0.05 and max(live) <= 0.10
    return verdict("target: mean <= 0.05, worst <= 0.10", met, text)


@claim("private-information centering")
def centering(row: Row) -> list[Check]:
    beta08 = [f"{CENTERING}/seed{s}.metrics.jsonl" for s in range(5)]
    beta095 = [f"{CENTERING}/beta0.95/seed{s}.metrics.jsonl" for s in (0, 3, 4)]
    fade = row.config(config_of(FADE[0]))
    held = row.config(config_of(beta095[0]))["private_centering"]
    beta = row.config(config_of(beta08[0]))["private_centering"]
    each = below_at_40(row, beta095) == len(beta095)
    return [
        *stats("beta 0.8", finals(row, beta08)),
        Check("beta 0.8, below 0.2 at 40", f"{below_at_40(row, beta08)} of 5 seeds"),
        *preset_at_40(row),
        Check(
            "the preset",
            f"the preset's {mean_sd(before_fade_finals(row))} (n = {len(BEFORE_FADE)})",
        ),
        target(finals(row, beta08), "the target (mean <= 0.05, worst <= 0.10) {}"),
        Check("beta 0.95", f"beta {held}, seeds 0/3/4: {mean_sd(finals(row, beta095))}"),
        Check("beta 0.95, below 0.2 at 40", "each below 0.2 by step 40" if each else "not each"),
        Check(
            "fade", f"Fading {fade['private_centering']} -> {fade['private_centering_final']} over"
        ),
        Check(
            "fade, seeds 0-4", f"seeds 0-4: {mean_sd(finals(row, FADE))} ({span(finals(row, FADE))}"
        ),
        Check(
            "beta 0.8 on those seeds",
            f"the same seeds with {beta}: {f(sum(finals(row, beta08)) / 5)}",
        ),
        *twin_end(row),
    ]


HANDS_1536 = [
    f"{CENTERING}/fade-1536-hands/seed0.metrics.jsonl",
    f"{CENTERING}/fade-1536-hands-avx2/seed1/metrics.jsonl",
    f"{CENTERING}/fade-1536-hands/seed2.metrics.jsonl",
    f"{CENTERING}/fade-1536-hands-avx2/seed3/metrics.jsonl",
    f"{CENTERING}/fade-1536-hands-avx2/seed4/metrics.jsonl",
]
# The preset's 384-hand runs in fp32 under the AVX2 cap (seeds 0-2), and seed 3's.
CAPPED = "docs/results/make-train-cpu-classes/avx2"
FP32_384 = {
    **{s: f"{CAPPED}/seed{s}.metrics.jsonl" for s in range(3)},
    3: "docs/results/make-train-cpu-classes/avx2-mmap-1mib/seed3.metrics.jsonl",
}


def fp32_preset(row: Row) -> list[float]:
    """The preset's 384-hand fp32 runs under the AVX2 cap (seeds 0-3) at step 120."""
    return finals(row, [FP32_384[s] for s in sorted(FP32_384)])


def before_floor_finals(row: Row, n: int = 5) -> list[float]:
    """The preset before its floor (the fade alone), seeds 0..n-1, through its own row."""
    return finals(row.row(BEFORE_FLOOR), FADE[:n])


def against_the_preset(row: Row, runs: list[str], live: list[float]) -> list[Check]:
    """Five seeds of a lever set beside the preset's fp32 runs of the same seeds, and where
    they stood at step 40."""
    fp32 = fp32_preset(row)
    lower = sum(map(float.__lt__, live, fp32))
    return [
        Check("seeds", seed_range(seeds(row, runs))),
        Check("fp32 preset", f"fp32 under the AVX2 cap {listed(fp32)}"),
        Check("lower in fp32", f"lower in {words(lower)} of {words(len(fp32))}"),
        Check("at step 40", f"at step 40: {listed([row.evals(m)[40] for m in runs])}"),
    ]


def floor_bound(row: Row, p_min: float = 0.1) -> dict[str, float]:
    """`benchmarks/kuhn_floor_bound.py`'s bound for one floor, from the floor's folder."""
    return dict(next(b for b in row.json(f"{FLOOR}/bound.json") if b["p_min"] == p_min))


@claim("four times the hands a step")
def four_times_hands(row: Row) -> list[Check]:
    live, averaged = finals(row, HANDS_1536), finals(row, HANDS_1536, AVERAGED)
    fade = before_floor_finals(row)
    by_seed = dict(zip(seeds(row, HANDS_1536), live, strict=True))
    lower = sum(a < b for a, b in zip(live, fade, strict=True))
    return [
        *stats("1,536 hands", live),
        Check("seeds", seed_range(list(by_seed))),
        Check("averaged weights", f"averaged weights {mean_sd(averaged)}"),
        Check("the preset", f"the preset's {mean_sd(fade)}"),
        Check(
            "lower than the same seed", f"lower than the preset's run of that seed in {lower} of 5"
        ),
        *[
            Check(f"fp32, seed {s}", f"{f(by_seed[s])} vs {f(row.final(FP32_384[s]))} (seed {s})")
            for s in (1, 3)  # the 1,536-hand seeds that ran in fp32 and have a 384-hand pair
        ],
        target(live, "Target (mean <= 0.05, worst <= 0.10) {}"),
    ]


@claim("a trust region on each update")
def trust_region(row: Row) -> list[Check]:
    folder = "docs/results/kuhn-trust-region"
    bounded = [row.final(f"{folder}/lr1e-3-seed{s}.metrics.jsonl") for s in (1, 2)]
    preset = row.row(PRESET)
    plain = [preset.final(f"{ASYNC}/sync-is-seed{s}.metrics.jsonl") for s in (1, 2)]
    late = [
        r
        for s in (1, 2)
        for r in row.metrics(f"{folder}/preset-seed{s}.metrics.jsonl")
        if r["step"] >= 30 and "train/step_kl" in r
    ]
    kl = [r["train/step_kl"] for r in late]
    acted = any(r.get("train/step_kl_scale", 1.0) < 1.0 for r in late)
    return [
        Check("seed 1", f"seed 1: {f(bounded[0])} vs {f(plain[0])}"),
        Check("seed 2", f"seed 2: {f(bounded[1])} vs {f(plain[1])}"),
        Check("means", f"mean {f(sum(bounded) / 2)} vs {f(sum(plain) / 2)}, n = 2"),
        Check(
            "after step 30",
            "the bound acted after step 30" if acted else "never acted after step 30",
        ),
        Check(
            "update sizes after step 30", f"updates {min(kl):.1g}-{max(kl):.1g} on their own rows"
        ),
    ]


@claim("the earlier preset (512 hands a step")
def earlier_preset(row: Row) -> list[Check]:
    files = [
        "docs/results/kuhn-regularised/metrics.jsonl",
        "docs/results/kuhn-make-train-averaged/metrics.jsonl",
        "docs/results/kuhn-averaging/seed0.metrics.jsonl",
        "docs/results/kuhn-averaging/seed1.metrics.jsonl",
    ]
    return [*stats("live", finals(row, files)), Check("seeds", seed_range(seeds(row, files)))]


@claim("population play (FSP) on Kuhn is worse")
def fsp(row: Row) -> list[Check]:
    folder = "docs/results/kuhn-fsp"
    plain = row.row(PRESET).final(BEFORE_FADE[0])
    half = row.evals(f"{folder}/fsp-frac50-seed0.metrics.jsonl")
    last = max(half)
    return [
        Check(
            "FSP vs plain",
            f"FSP {f(row.final(f'{folder}/fsp-seed0.metrics.jsonl'))} vs plain {f(plain)}",
        ),
        Check("half the games live", f"{f(half[last])} at step {last}"),
    ]


@claim("population play whose pool starts after the escape")
def fsp_late(row: Row) -> list[Check]:
    runs = [f"{CENTERING}/fsp-late/seed{s}.metrics.jsonl" for s in range(3)]
    live, pool = finals(row, runs), finals(row, runs, POOL)
    fade = before_floor_finals(row, 3)
    plain = finals(row.row(PRESET), PLAIN_0_2)
    return [
        Check("live", f"live {mean_sd(live)} ({listed(live)})"),
        Check("pool average", f"pool average {mean_sd(pool)} ({listed(pool)})"),
        Check("the fade alone", f"vs {f(sum(fade) / 3)} ({listed(fade)}), n = 3 each"),
        Check("the preset", f"the preset's plain self-play on the same seeds {f(sum(plain) / 3)}"),
    ]


@claim("population play from step 40 with uniform opponents")
def fsp_uniform_late(row: Row) -> list[Check]:
    runs = [f"{CENTERING}/fsp-uniform-late/seed{s}/metrics.jsonl" for s in range(5)]
    live, pool = finals(row, runs), finals(row, runs, POOL)
    fade = before_floor_finals(row)
    return [
        Check("live", f"live {listed(live)}: {mean_sd(live)}"),
        Check("pool average", f"pool average {mean_sd(pool)}"),
        *against_the_preset(row, runs, live),
        Check("bf16 fade", f"bf16 (the fade) {mean_sd(fade)}"),
    ]


@claim("prioritised population play is no better")
def prioritised(row: Row) -> list[Check]:
    live, pool = finals(row, PRIORITISED), finals(row, PRIORITISED, POOL)
    plain = finals(row.row(PRESET), PLAIN_0_2)
    fade_runs = [f"{CENTERING}/fsp-fade/seed{s}.metrics.jsonl" for s in range(3)]
    fade_live, fade_pool = finals(row, fade_runs), finals(row, fade_runs, POOL)
    fade_alone = before_floor_finals(row, 3)
    checks = [
        Check(f"seed {s}", f"seed {s}: {f(live[s])} (pool {f(pool[s])}) vs plain {f(plain[s])}")
        for s in range(3)
    ]
    return checks + [
        Check("mean", f"{f(sum(live) / 3)} (pool {f(sum(pool) / 3)}) vs plain {f(sum(plain) / 3)}"),
        verdict(
            "target: the population arm no worse than plain",
            sum(live) <= sum(plain),
            "{} (the population arm should be no worse)",
        ),
        Check(
            "with the fade",
            f"{mean_sd(fade_live)} (pool {mean_sd(fade_pool)}; {listed(fade_live)})",
        ),
        Check("the fade alone", f"vs {f(sum(fade_alone) / 3)} ({listed(fade_alone)})"),
    ]


@claim("a lag of one version learns Kuhn like the sync loop")
def lag_one(row: Row) -> list[Check]:
    ppo, is_ = (
        row.final(f"{ASYNC}/async-lag1.metrics.jsonl"),
        row.final(f"{ASYNC}/async-is-st1.metrics.jsonl"),
    )
    both = f"{mean_sd([ppo, is_])} ({f(ppo)} with ppo, {f(is_)} with the preset's loss), n = 2"
    return [Check("both", both)]


BOUND_TWO = [f"{ASYNC}/async-is-st2.metrics.jsonl"] + [
    f"{ASYNC}/async-is-st2-seed{s}.metrics.jsonl" for s in range(1, 5)
]


def bound_two(row: Row) -> list[float]:
    return finals(row, BOUND_TWO)


@claim("a staleness bound of two stays on the card-blind plateau")
def staleness_two(row: Row) -> list[Check]:
    plain = bound_two(row)
    ppo = finals(
        row, [f"{ASYNC}/async-lag2.metrics.jsonl", f"{ASYNC}/async-lag2-seed1.metrics.jsonl"]
    )
    return [
        *stats("bound 2", plain),
        Check("seeds", seed_range(seeds(row, BOUND_TWO))),
        Check("below 0.25", f"{sum(x < 0.25 for x in plain)} of {len(plain)} below 0.25"),
        Check("ppo", f"with ppo: {listed(ppo)}"),
    ]


@claim("lr_kl_target=0.05 fixes the bound of two")
def lr_kl_target(row: Row) -> list[Check]:
    runs = [
        f"{ASYNC}/async-kl-st2-seed0.metrics.jsonl",
        "docs/results/kuhn-async-kl-seeds/seed1.metrics.jsonl",
        f"{ASYNC}/async-kl-st2-seed2.metrics.jsonl",
        f"{ASYNC}/async-kl-st2-seed3.metrics.jsonl",
        "docs/results/kuhn-async-kl-seeds/seed4.metrics.jsonl",
    ]
    live, plain = finals(row, runs), bound_two(row)
    preset = row.row(PRESET)
    runs_of = dict(zip(BEFORE_FADE, seeds(preset, BEFORE_FADE), strict=True))
    seed0 = min(preset.final(m) for m, s in runs_of.items() if s == 0)
    sync = [seed0] + [preset.final(f"{ASYNC}/sync-is-seed{s}.metrics.jsonl") for s in (1, 2, 3)]
    below = all(a < b for a, b in zip(live[:4], sync, strict=True))
    return [
        *stats("lr_kl_target", live),
        Check("seeds", seed_range(seeds(row, runs))),
        Check("off the plateau", f"{sum(x < 0.25 for x in live)} of 5 off the plateau"),
        Check(
            "plain bound 2",
            f"plain bound 2 on the same seeds {mean_sd(plain)}, {sum(x < 0.25 for x in plain)} of 5",
        ),
        Check(
            "against sync",
            "seeds 0-3 each below the sync run of its seed" if below else "not each below",
        ),
        Check("averaged weights", f"averaged weights {mean_sd(finals(row, runs, AVERAGED))}"),
    ]


@claim("in the shared-parameter Kuhn twin with the cards in rank order")
def twin_floor(row: Row) -> list[Check]:
    """Final exploitability per (rank strength, floor) over the bases; the J bluff's deaths."""
    runs = row.metrics(f"{CENTERING}/twin-floor/runs.jsonl")

    def ends(ordinal: float, coef: float) -> list[float]:
        return [r["final_exploitability"] for r in runs
                if r["ordinal"] == ordinal and r["floor"][0] == coef
                and r["floor"][1] in (0.0, 0.1)]  # fmt: skip

    bluffs = [r["final_policy"][1] for r in runs if r["ordinal"] == 3.0 and r["floor"][0] == 0]
    dead = [b for b in bluffs if b < 0.05]
    coef, p_min = next(r["floor"] for r in runs if r["floor"][0] == 0.2)
    return [
        Check("setting", f"floor {p_min:g} at coef {coef:g}"),
        Check("strength 3, off", f"off {mean_sd(ends(3.0, 0.0))} (worst {f(max(ends(3.0, 0.0)))}"),
        Check("dead bluffs", f"bluff {span(dead, 2)} in {len(dead)} of {len(bluffs)}"),
        Check(
            "strength 3, floor",
            f"coef 0.2 {mean_sd(ends(3.0, 0.2))} (worst {f(max(ends(3.0, 0.2)))}",
        ),
        Check("strength 7", f"strength 7: {mean_sd(ends(7.0, 0.0))} vs {mean_sd(ends(7.0, 0.2))}"),
        Check("no rank", f"no rank order: {mean_sd(ends(0.0, 0.0))} vs {mean_sd(ends(0.0, 0.2))}"),
    ]


@claim("a floor under every legal move")
def move_floor_model(row: Row) -> list[Check]:
    """The floor's runs (fp32, the AVX2 machine) against the preset's on the same seeds, and
    the floor's own bias: the least exploitability with every move kept at 0.1 or more."""
    runs = FLOOR_RUNS
    live, averaged = finals(row, runs), finals(row, runs, AVERAGED)
    fade, bound = before_floor_finals(row), floor_bound(row)
    return [
        *stats("live", live),
        Check("live", f"live {listed(live)}"),
        Check("averaged weights", f"averaged weights {mean_sd(averaged)}"),
        *against_the_preset(row, runs, live),
        Check("bf16 fade", f"bf16 (the fade) {listed(fade)}: {mean_sd(fade)}"),
        Check("lower in bf16", f"lower in {words(sum(map(float.__lt__, live, fade)))} of five"),
        Check("bound", f"is {bound['least']:.4f} exploitable at best"),
        Check("clipped equilibrium", f"clipped into [0.1, 0.9] {f(bound['clipped_equilibrium'])}"),
    ]
