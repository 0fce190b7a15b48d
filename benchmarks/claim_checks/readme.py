"""README.md's headline numbers, each recomputed through the claims row it comes from.

The items: every bullet of "## Results", the exploitability and the time rows of the
`make train` table, and the paragraph of "## Training a real model" that says what a GPU gives. Each
item needs a function here (keyed by the start of its text), and every decimal number in
it must be one the function recomputed.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from pathlib import Path

from .core import (
    AVERAGED,
    POOL,
    Check,
    NoData,
    Outcome,
    Table,
    compare,
    f,
    mean_sd,
    span,
    verdict,
    words,
)
from .engine import CPU_BENCH_FOLDERS, DECODE_RUNS, FIRST_BENCH, H200, benches, elapsed_min
from .kuhn import (
    AVERAGED as KUHN_AVERAGED,
)
from .kuhn import (
    BEFORE_FADE,
    BEFORE_FLOOR,
    FADE,
    FLOOR_RUNS,
    FULL_WIDTH_STEPS,
    NATIVE,
    NATIVE_BF16,
    PRESET_RUNS,
    SAMPLED,
    SAMPLED_BESIDE,
    bf16_native,
    config_of,
    finals,
    full_width_runs,
    median_step,
    mixtures,
    peak_gb,
    sampled_beside_full_width,
    seeds,
    timed_runs,
    wall_minutes,
)
from .kuhn_levers import bound_two, floor_bound, fp32_preset
from .leduc import BALANCED, leduc_full_width, lower, recipe_runs, scale

Headline = Callable[[Table], list[Check]]
HEADLINES: dict[str, Headline] = {}
MAKE_TRAIN = "make train lowers"  # since 2026-12-07: full width
PRESET = "the preset before the centering fade"


def headline(prefix: str) -> Callable[[Headline], Headline]:
    def add(fn: Headline) -> Headline:
        HEADLINES[prefix] = fn
        return fn

    return add


def readme_items(readme: Path) -> list[str]:
    """The headline texts, each joined onto one line."""
    text = readme.read_text(encoding="utf-8")
    results = text.split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    bullets = [" ".join(b.split()) for b in re.split(r"\n- ", "\n" + results)[1:]]
    table = [
        ln
        for ln in text.splitlines()
        if ln.startswith(("| exploitability", "| time, memory", "| the run"))
    ]
    gpu = text.split("\n## Training a real model\n", 1)[1].split("\n## ", 1)[0]
    paragraphs = [" ".join(p.split()) for p in gpu.split("\n\n") if "Know before you start" in p]
    return table + paragraphs + bullets


def check_readme(readme: Path, table: Table) -> list[Outcome]:
    outcomes = []
    for item in readme_items(readme):
        name = "README: " + item.lstrip("| ")[:70]
        matches = [p for p in HEADLINES if item.lstrip("| ").startswith(p)]
        if not matches:
            outcomes.append(Outcome(name, "no function", ["no recompute function for this item"]))
            continue
        try:
            checks = HEADLINES[matches[0]](table)
        except NoData as err:
            outcomes.append(Outcome(name, "no data", [str(err)]))
            continue
        outcomes.append(compare(name, {"claim": "", "value": item}, checks))
    return outcomes


def preset(table: Table) -> tuple[list[float], list[float], list[float]]:
    """The sampled preset's bf16 runs at step 120 (live, averaged) and the base model at
    step 0 (theirs and the fp32 runs')."""
    row = table.find(SAMPLED)
    start = [row.evals(m)[0] for m in PRESET_RUNS + FLOOR_RUNS]
    return finals(row, PRESET_RUNS), finals(row, PRESET_RUNS, AVERAGED), start


def mixture_of(table: Table) -> str:
    """`make train`'s seeds' mixtures of checkpoints 100-200, as the README writes them."""
    row = table.find(MAKE_TRAIN)
    return mean_sd(mixtures(row, full_width_runs(row)))


def full_width(table: Table) -> tuple[list[float], list[float], list[float], list[int]]:
    """`make train`'s runs: live and averaged at the end, the base model at step 0, seeds."""
    row = table.find(MAKE_TRAIN)
    runs = full_width_runs(row)
    live = [row.final(m, step=FULL_WIDTH_STEPS) for m in runs]
    averaged = [row.final(m, KUHN_AVERAGED, FULL_WIDTH_STEPS) for m in runs]
    return live, averaged, [row.evals(m)[0] for m in runs], seeds(row, runs)


def sci(x: float) -> str:
    """3e-4 as the README writes it (not 0.0003 or 3e-04)."""
    mantissa, exponent = f"{x:e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def seed_words(numbers: list[int]) -> str:
    """Seeds as the README writes them ("0-4")."""
    s = sorted(numbers)
    return f"{s[0]}-{s[-1]}" if s == list(range(s[0], s[-1] + 1)) else ", ".join(map(str, s))


@headline("exploitability (0 = Nash")
def make_train_table(table: Table) -> list[Check]:
    live, averaged, start, runs = full_width(table)
    sampled, _, _ = preset(table)
    return [
        Check("base model", f"the base model {span(start)}"),
        Check("last weights", f"{mean_sd(live)} ({f(min(live))} to {f(max(live))})"),
        Check("averaged weights", f"averaged weights {mean_sd(averaged)}"),
        Check("seeds", f"over seeds {seed_words(runs)}"),
        Check("mixture", f"checkpoints {mixture_of(table)}"),
        Check(
            "sampled preset",
            f"{mean_sd(sampled)} ({f(min(sampled))} to {f(max(sampled))}, seeds {seed_span()}",
        ),
        *recipe_sampled(table),
    ]


def recipe_sampled(table: Table) -> list[Check]:
    """The recipe's keys with sampled games, beside full width on the same seed."""
    got = sampled_beside_full_width(table.find(SAMPLED_BESIDE))
    if got["seeds"] != [0.0]:
        raise NoData("the README states seed 0 alone; the data holds other seeds now")
    return [
        Check("sampled recipe", f"ends seed 0 at {f(got['sampled live'][0])}"),
        Check("full width", f"against full width's {f(got['full width live'][0])}"),
    ]


def seed_span() -> str:
    """The seeds of the sampled preset's runs, as the README writes them ("0-4")."""
    return seed_words([int(m.split("/seed")[1].split("/")[0]) for m in PRESET_RUNS])


@headline("the run")
def make_train_steps(table: Table) -> list[Check]:
    row = table.find(MAKE_TRAIN)
    runs = full_width_runs(row)
    steps = {max(r["step"] for r in row.metrics(m)) for m in runs}
    if len(steps) != 1:
        raise NoData(f"the runs behind the headline ended at different steps: {sorted(steps)}")
    cfg = row.config(config_of(runs[0]))
    lr = [sci(float(x)) for x in str(cfg["learning_rate"]).removeprefix("cosine:").split("->")]
    return [
        Check("steps", f"{steps.pop()} steps"),
        Check("learning rate", f"from {lr[0]} to {lr[1]}"),
        Check("floor", f"a floor under every legal move's probability ({cfg['move_floor']})"),
    ]


@headline("time, memory")
def make_train_cost(table: Table) -> list[Check]:
    row = table.find(NATIVE)
    timed, alone = timed_runs(row)
    return [
        Check("minutes", f"{span([wall_minutes(row, t) for t in alone], 0)} minutes"),
        Check("step", f"a step {span([median_step(row, t) for t in alone], 1)} s"),
        Check("memory", f"peak {span([peak_gb(row, t) for t in timed], 1)} GB"),
        *bf16_class(table),
    ]


def bf16_class(table: Table) -> list[Check]:
    got = bf16_native(table.find(NATIVE_BF16))
    return [
        Check("bf16 minutes", f"natively: {got['minutes']:.0f} minutes"),
        Check("bf16 step", f"a step {got['step']:.1f} s, peak {got['peak']:.1f} GB"),
        Check(
            "bf16 end", f"seed 0 ended at {f(got['live'])} (averaged weights {f(got['averaged'])})"
        ),
        Check("fp32 end", f"against {f(got['fp32 live'])} ({f(got['fp32 averaged'])}) in fp32"),
    ]


@headline("Kuhn exploitability from")
def kuhn(table: Table) -> list[Check]:
    live, _, start, runs = full_width(table)
    sampled, _, _ = preset(table)
    fade = finals(table.find(BEFORE_FLOOR), FADE)
    before = finals(table.find(PRESET), BEFORE_FADE)
    return [
        Check("make train", f"from {span(start)} (the base model) to {mean_sd(live)}"),
        Check("seeds", f"seeds {seed_words(runs)} (worst {f(max(live))})"),
        Check("mixture", f"is at {mixture_of(table)}"),
        Check("sampled preset", f"ended at {mean_sd(sampled)} (worst {f(max(sampled))})"),
        Check("before the floor", f"{mean_sd(fade)} (worst {f(max(fade))})"),
        Check(
            "before the fade",
            f"{mean_sd(before)} over the {len(before)} runs on file, worst {f(max(before))}",
        ),
        Check("aim (not data)", "at or below 0.05, 0.04 on average"),
        verdict(
            "aim: every seed <= 0.05, mean <= 0.04",
            max(live) <= 0.05 and sum(live) / len(live) <= 0.04,
            "{}: " + f"{words(sum(x <= 0.05 for x in live))} seeds of five end at or below 0.05",
        ),
    ]


@headline("Population play against a pool")
def population(table: Table) -> list[Check]:
    late = table.find("population play whose pool starts after the escape")
    runs = [f"docs/results/kuhn-centering/fsp-late/seed{s}.metrics.jsonl" for s in range(3)]
    early = table.find("prioritised population play is no better")
    early_runs = [f"docs/results/kuhn-centering/fsp-fade/seed{s}.metrics.jsonl" for s in range(3)]
    alone = finals(table.find(BEFORE_FLOOR), FADE[:3])
    return [
        Check("seeds", f"(seeds 0-{len(runs) - 1}: live"),
        Check("live", f"live {f(statistics.fmean(finals(late, runs)))}"),
        Check("pool", f"average policy {f(statistics.fmean(finals(late, runs, POOL)))}"),
        Check("fade alone", f"against {f(statistics.fmean(alone))}"),
        Check("from step 0", f"worse ({f(statistics.fmean(finals(early, early_runs)))})"),
    ]


@headline("Its floor under every legal move")
def move_floor(table: Table) -> list[Check]:
    row = table.find("a floor under every legal move")
    live = finals(row, FLOOR_RUNS)
    fp32, bound = fp32_preset(row), floor_bound(row)
    return [
        Check("fp32 preset", f"without it ends at {span(fp32)} (seeds 0-{len(fp32) - 1})"),
        Check("five seeds", f"with it at {span(live)} (seeds 0-{len(live) - 1})"),
        Check("floor", f"every move at {bound['p_min']} or more"),
        Check("bound", f"is {bound['least']:.4f} exploitable at best"),
        Check("aim (not data)", "0.05 aim"),
    ]


@headline("Leduc Hold'em, exactly")
def leduc(table: Table) -> list[Check]:
    row = table.find("ten steps of the embedded-leduc recipe lowered")
    r = recipe_runs(row, BALANCED)
    seeds = sorted(int(s) for s in r["seed"])
    uniform, solved = scale()
    return [
        Check("before and after", f"from {span(r['start'])} to {mean_sd(r['live'])} chips"),
        Check("seeds", f"seeds {seeds[0]}-{seeds[-1]}; lower in {words(lower(r))} of"),
        Check("of", f"of {words(len(seeds))}"),
        Check("range", f"({span(r['live'])}, seeds"),
        Check("scale", f"uniform play is at {uniform:.3f}"),
        Check("CFR", f"1,000 iterations at {solved:.3f}"),
        *leduc_full_width_words(table),
    ]


def leduc_full_width_words(table: Table) -> list[Check]:
    """The README's sentence on full width, from that claim's own checks."""
    got = {c.label: c.value for c in leduc_full_width(table.find("full width on Leduc"))}
    return [
        Check("full width: seeds", f"seed 0, {got['steps']}"),
        Check("full width: lowest", f"reached {got['lowest'].removeprefix('lowest ')}"),
        Check("full width: live", f"drifted back to {got['live']}"),
    ]


@headline("TicTacToe learns against sparring partners")
def tictactoe(table: Table) -> list[Check]:
    row = table.find("TicTacToe against sparring partners")
    folder = "docs/results/tictactoe-brief"
    base, mid, end = (
        row.json(f"{folder}/{n}-greedy-200.json")["metrics"]
        for n in ("base", "sparring-step45", "sparring-step80")
    )
    last = row.json(f"{folder}/sparring-step80-greedy-200.json")  # the checkpoint evaluated
    win = "eval/TicTacToe-v0/random/seat{}/win_rate"
    draws = [
        m[f"eval/TicTacToe-v0/optimal/seat{s}/draw_rate"] for m in (base, mid, end) for s in (0, 1)
    ]
    return [
        Check(
            "first mover", f"{base[win.format(0)]:.2f} -> {end[win.format(0)]:.2f} as first mover"
        ),
        Check("second mover", f"{base[win.format(1)]:.2f} -> {end[win.format(1)]:.2f} as second"),
        Check("draws", f"stay at {span(draws, 2)}"),
        Check("steps", f"in {last['candidate']['step']} steps"),
    ]


@headline("The async actor-learner")
def async_loop(table: Table) -> list[Check]:
    row = table.find("a lag of one version")
    lag = finals(
        row,
        [
            "docs/results/kuhn-async/async-lag1.metrics.jsonl",
            "docs/results/kuhn-async/async-is-st1.metrics.jsonl",
        ],
    )
    plain = bound_two(table.find("a staleness bound of two"))
    kl_row = table.find("lr_kl_target=0.05")
    kl = [
        kl_row.final(p)
        for p in kl_row.glob("docs/results/kuhn-async-kl-seeds", "seed*.metrics.jsonl")
    ]
    kl += [
        kl_row.final(f"docs/results/kuhn-async/async-kl-st2-seed{s}.metrics.jsonl")
        for s in (0, 2, 3)
    ]
    return [
        Check("lag one", f"({mean_sd(lag)}, n = {len(lag)})"),
        Check("bound two", f"({mean_sd(plain)}, n = {len(plain)})"),
        Check("lr_kl_target", f"{mean_sd(kl)}, n = {len(kl)}"),
    ]


@headline("The sampler is")
def speed(table: Table) -> list[Check]:
    sampler = benches(
        table.find("the sampler beats"),
        ["docs/results/engine-decode-step", "docs/results/engine-ceilings"],
    )
    generate = [
        b[f"{d}/sample/speedup_vs_hf_generate"] for b in sampler for d in ("float32", "bfloat16")
    ]
    sharing_row = table.find("sharing prompt prefixes")
    shared = [sharing_row.json(FIRST_BENCH), *benches(sharing_row, CPU_BENCH_FOLDERS)]
    sharing = [
        b[f"{d}/learn/speedup_prefix_sharing"] for b in shared for d in ("float32", "bfloat16")
    ]
    sbs = table.find("make train got faster")
    (_, before), (_, after) = (
        elapsed_min(sbs.text(f"docs/results/make-train-side-by-side/{n}.time.txt"))
        for n in ("before", "after")
    )
    return [
        Check("sampler", f"{span(generate, 0)}x faster than per-request"),
        Check("learner", f"{span(sharing, 0)}x faster with shared prefixes"),
        Check("make train", f"from {before / 60:.0f} to {after / 60:.0f} minutes"),
    ]


def h200(table: Table) -> tuple[list[float], list[float], float, float]:
    row = table.find("on the H200 the decode step")
    runs = [row.json(f"{H200}/bench-decode-qwen3-{s}-rows{n}.json") for s, n in DECODE_RUNS]
    learn = table.find("full fine-tuning's learner").json(f"{H200}/bench-learn-qwen3-4b-rank0.json")
    return (
        [r["sample/speedup_packed_decode"] for r in runs],
        [r["sample/decode_share_of_bound"] for r in runs],
        runs[0]["sample/decode_tokens_per_s"],
        learn["learn/share_of_matmul_peak"],
    )


@headline("On an H200")
def gpu_headline(table: Table) -> list[Check]:
    speedup, share, _, peak = h200(table)
    return [
        Check("graphs", f"{span(speedup, 1)}x the eager forward"),
        Check("share of the bound", f"({span(share, 2)} of the memory-bandwidth bound)"),
        Check("full fine-tuning", f"reaches {peak:.2f} of the bf16 matmul peak"),
    ]


@headline("Know before you start")
def gpu_paragraph(table: Table) -> list[Check]:
    speedup, share, rate, peak = h200(table)
    return [
        Check("graphs", f"{span(speedup, 1)}x the eager forward"),
        Check("16 rows", f"{rate:,.0f} tokens/s at 16 rows"),
        Check("share of the bound", f"{span(share, 2)} of the memory-bandwidth bound"),
        Check("full fine-tuning", f"reaches {peak:.2f} of the bf16 matmul peak"),
    ]
