"""The Leduc Hold'em claims: the embedded model's exact exploitability before and after the
embedded-leduc recipe, on the scale of the uniform policy and of the shipped CFR player
(1,000 iterations)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from .core import Check, NoData, Row, claim, mean_sd, span, verdict, words
from .engine import elapsed_min

FOLDER = "docs/results/leduc-base"


def from_table(row: Row, path: str) -> dict[str, Any]:
    """An evaluation report's Leduc numbers recomputed from the policy table it stores
    (every situation's move distribution) through OpenSpiel, not read from its summary."""
    from spiral.analysis.leduc import leduc_exploitability

    stored = row.json(path)["exploitability"]["LeducPoker-v0"]["distributions"]

    def dists(positions: Sequence[tuple[Any, int]]) -> list[dict[str, float]]:
        return [stored[repr((seat, *state.info_key(seat)))] for state, seat in positions]

    return leduc_exploitability(dists)


@claim("the embedded model's Leduc play before training")
def leduc_base(row: Row) -> list[Check]:
    reports = {
        style: from_table(row, f"{FOLDER}/base-{style}.json") for style in ("focused", "brief")
    }
    brief = reports["brief"]
    second = sum(brief[f"br_gain_seat{s}_round2"] for s in (0, 1)) / brief["nash_conv"]
    uniform, solved = scale()
    return [
        *[Check(f"{style} prompt", f"{r['exploitability']:.4f}") for style, r in reports.items()],
        Check("uniform policy", f"{uniform:.4f}"),
        Check("CFR, 1,000 iterations", f"{solved:.4f}"),
        Check("share of the brief prompt's NashConv gained in round 2", f"{100 * second:.0f}%"),
    ]


LISTED = "docs/results/leduc-recipe-listed-order"  # each step's deals skewed
BALANCED = "docs/results/leduc-recipe"  # each step's deals spread over all 120
GAME = "eval/LeducPoker-v0/"


def round_gain(row: Row, metrics: str, step: int, rnd: int) -> float:
    """What a best responder gains in betting round `rnd` at `step`, both seats summed."""
    keys = [f"{GAME}br_gain_seat{s}_round{rnd}_t1" for s in (0, 1)]
    return sum(row.evals(metrics, k)[step] for k in keys)


def recipe_runs(row: Row, folder: str = LISTED) -> dict[str, list[float]]:
    """The recipe's seeds in `folder`: exploitability at steps 0 and 10 (live, averaged),
    what a best responder gains per round (both seats) at steps 0 and 10, wall minutes."""
    runs = row.glob(folder, "seed*/metrics.jsonl")

    out = {
        "live": [row.final(m, GAME + "exploitability_t1", step=10) for m in runs],
        "averaged": [row.final(m, GAME + "averaged/exploitability_t1", step=10) for m in runs],
        "start": [row.evals(m, GAME + "exploitability_t1")[0] for m in runs],
        "wall": [
            row.json(m.removesuffix("metrics.jsonl") + "seeds_wall_s.json")["wall_s"] / 60
            for m in runs
        ],
        "seed": [
            float(row.config(m.removesuffix("metrics.jsonl") + "config.json")["seed"]) for m in runs
        ],
    }
    for rnd in (1, 2):
        for step in (0, 10):
            out[f"round{rnd}@{step}"] = [round_gain(row, m, step, rnd) for m in runs]
    return out


def scale() -> tuple[float, float]:
    """The uniform policy's and the shipped CFR player's exploitability."""
    from spiral.agents.leduc_cfr import LeducCfrAgent
    from spiral.analysis.leduc import leduc_exploitability, uniform_dists

    cfr = LeducCfrAgent()
    solved = leduc_exploitability(lambda ps: [cfr.action_probabilities(s) for s, _ in ps])
    return leduc_exploitability(uniform_dists)["exploitability"], solved["exploitability"]


def round_gains(r: dict[str, list[float]], label: str = "round") -> list[Check]:
    """What a best responder gains per round, steps 0 -> 10, means over the seeds."""
    mean = {k: statistics.fmean(v) for k, v in r.items()}
    return [
        Check(
            f"{label}-{k} gains",
            f"round-{k} gains {mean[f'round{k}@0']:.2f} -> {mean[f'round{k}@10']:.2f}",
        )
        for k in (1, 2)
    ]


def lower(r: dict[str, list[float]]) -> int:
    """Seeds whose live weights end lower than they started."""
    return sum(a < b for a, b in zip(r["live"], r["start"], strict=True))


@claim("ten steps of the embedded-leduc recipe lowered")
def leduc_recipe(row: Row) -> list[Check]:
    balanced, skewed = recipe_runs(row, BALANCED), recipe_runs(row, LISTED)
    if lower(skewed) != len(skewed["live"]):
        raise NoData("a seed with skewed steps ends no lower than it started")
    uniform, solved = scale()
    return [
        Check("step 0", f"step 0 {span(balanced['start'])}"),
        Check("live: mean ± sd", mean_sd(balanced["live"])),
        Check("live: range", span(balanced["live"])),
        Check("averaged: mean ± sd", mean_sd(balanced["averaged"])),
        Check("averaged: range", span(balanced["averaged"])),
        Check("seeds", f"n = {len(balanced['live'])}"),
        Check("lower", f"lower at step 10 in {words(lower(balanced))} of"),
        Check("of", f"of {words(len(balanced['live']))} seeds"),
        *round_gains(balanced),
        Check("skewed: live", f"live {mean_sd(skewed['live'])} ({span(skewed['live'])})"),
        Check("skewed: averaged", f"averaged {mean_sd(skewed['averaged'])}"),
        Check("skewed: seeds", f"skewed steps, seeds 0-{len(skewed['live']) - 1}"),
        Check("skewed: wall time", f"{span(skewed['wall'], 0)} min a seed"),
        *round_gains(skewed, "skewed round"),
        Check("uniform", f"{uniform:.4f}"),
        Check("CFR-1000", f"CFR-1000 {solved:.4f}"),
    ]


FULL_WIDTH = "docs/results/leduc-full-width"
FW = "full_width/LeducPoker-v0/"


@claim("full width on Leduc")
def leduc_full_width(row: Row) -> list[Check]:
    """The full-width seeds: exact exploitability at the last step (live, averaged), the
    lowest any step's scored policy reached, each round's best-response gain from the
    first step to the last, and GNU time's wall clock where a run had the machine alone."""
    runs = row.glob(FULL_WIDTH, "seed*/metrics.jsonl")
    last = {max(row.evals(m, GAME + "exploitability_t1")) for m in runs}
    if len(last) != 1:
        raise NoData(f"the seeds' last evaluations differ: steps {sorted(last)}")
    end = last.pop()
    live = [row.final(m, GAME + "exploitability_t1", step=end) for m in runs]
    averaged = [row.final(m, GAME + "averaged/exploitability_t1", step=end) for m in runs]
    lowest = [min(row.evals(m, FW + "exploitability").values()) for m in runs]
    checks = [
        Check("seeds", f"n = {len(runs)}"),
        Check("steps", f"{end} steps"),
        Check("live", mean_sd(live) if len(live) > 1 else f"{live[0]:.3f}"),
        Check("averaged", f"averaged {span(averaged)}"),
        Check("lowest", f"lowest {span(lowest)}"),
        *(
            verdict("target: <= 1.16 in three seeds", met, text, where)
            for met in [len(live) >= 3 and max(live) <= 1.16]
            for text, where in (
                ("at most 1.16 in three seeds, {}", "claim"),
                ("the target {}", "value"),
            )
        ),
    ]
    for rnd in (1, 2):
        first, final = (
            statistics.fmean(round_gain(row, m, step, rnd) for m in runs) for step in (0, end)
        )
        checks.append(Check(f"round {rnd}", f"round-{rnd} gains {first:.2f} -> {final:.2f}"))
    sampled = [
        row.final(m, GAME + "exploitability_t1", step=end)
        for m in row.glob(FULL_WIDTH, "sampled-seed*/metrics.jsonl")
    ]
    checks.append(Check("sampled", f"the same keys sampled {span(sampled)}"))
    timed = row.glob(FULL_WIDTH, "seed*/time")
    minutes = [elapsed_min(row.text(t))[1] / 60 for t in timed]
    return [*checks, Check("minutes", f"{span(minutes, 0)} min a seed")]
