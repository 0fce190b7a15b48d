"""The claims whose data is a test, a run's own files, TicTacToe, or the reliability
benchmarks."""

from __future__ import annotations

import re
from fractions import Fraction

from .core import Check, NoData, Row, claim, f, span, verdict

KNOWN = "tests/agents/test_known_values.py"
EXPLOITABILITY = "tests/evaluation/test_exploitability.py"
VOLATILE = ("time", "perf/", "progress/")


def found(pattern: str, text: str, where: str) -> re.Match[str]:
    match = re.search(pattern, text)
    if match is None:
        raise NoData(f"{where} no longer holds {pattern!r}")
    return match


@claim("games and their known values are reproduced")
def known_values(row: Row) -> list[Check]:
    known, kuhn = row.text(KNOWN), row.text(EXPLOITABILITY)
    fractions = re.findall(r"Fraction\((\d+), (\d+)\)", known)
    n = int(found(r"n, wins = ([\d_]+), 0", known, KNOWN).group(1))
    wins = int(found(r"assert wins == ([\d_]+)", known, KNOWN).group(1))
    reference = float(found(r"wins / n - (0\.\d+)", known, KNOWN).group(1))
    nash = found(r"value0 == pytest\.approx\((-?[\d.]+) / ([\d.]+)", known, KNOWN)
    uniform = found(
        r'report\["exploitability"\] == pytest\.approx\((\d+) / (\d+)', kuhn, EXPLOITABILITY
    )
    value = Fraction(float(nash.group(1))).limit_denominator(100) / Fraction(float(nash.group(2)))
    return [
        *[Check(f"TicTacToe exact rate {a}/{b}", f"{a}/{b}") for a, b in fractions],
        Check("Kuhn Nash value", f"{value.numerator}/{value.denominator}"),
        Check("uniform Kuhn exploitability", f"{uniform.group(1)}/{uniform.group(2)}"),
        Check("random vs random", f"{100 * wins / n:.2f}% over {n:,} games"),
        Check("reference", f"reference {100 * reference:.2f}%"),
    ]


@claim("spiral eval of a run measures what the run trained")
def eval_inherits(row: Row) -> list[Check]:
    folder = "docs/results/kuhn-make-train-2026-11-26"
    report = row.json(f"{folder}/eval/step_000120_KuhnPokerSingle-v0_vs_random_seed0.json")
    evaluated = report["exploitability"]["KuhnPokerSingle-v0"]["exploitability"]
    trained = row.final(f"{folder}/metrics.jsonl")
    same = "both" if evaluated == trained else f"vs {trained!r}"
    return [Check("the checkpoint's exploitability and the run's last", f"{evaluated!r} {same}")]


@claim("a fresh clone passes make test")
def make_test(row: Row) -> list[Check]:
    """Reads docs/results/make-test/*.json (the newest by name) once that folder exists."""
    runs = row.glob("docs/results/make-test", "*.json")
    result = row.json(runs[-1])
    checks = [
        Check("passed", f"{result['passed']} passed"),
        Check("skipped", f"{result['skipped']} skipped"),
        Check("vLLM tests", f"{result['vllm_passed']} vLLM"),
    ]
    if "minutes" in result:
        checks.append(Check("minutes", f"{f(result['minutes'], 1)} min"))
    if "capped_passed" in result:
        checks += [
            Check("capped pass", f"{result['capped_passed']} passed capped at AVX2"),
            Check("capped minutes", f"{f(result['capped_minutes'], 1)} min"),
        ]
    failed = sum(result.get(k, 0) for k in ("failed", "vllm_failed", "capped_failed"))
    if failed:
        checks.append(Check("failed", f"{failed} failed"))
    return checks


def differing(before: list[dict], after: list[dict]) -> tuple[set[str], float]:
    """Keys that differ anywhere (timings left out), and their largest relative difference."""
    keys, worst = set(), 0.0
    for a, b in zip(before, after, strict=True):
        for k in set(a) | set(b):
            if not k.startswith(VOLATILE) and a.get(k) != b.get(k):
                keys.add(k)
                x, y = float(a[k]), float(b[k])
                worst = max(worst, abs(x - y) / max(abs(x), abs(y), 1e-300))
    return keys, worst


@claim("the house's refactor changed no result")
def refactor(row: Row) -> list[Check]:
    folder = "docs/results/refactor-bit-identity"
    before = row.metrics(f"{folder}/before-23-steps.metrics.jsonl")
    after = row.metrics(f"{folder}/after-23-steps.metrics.jsonl")
    keys, worst = differing(before, after)
    pattern = sorted({re.sub(r"^rae/[^/]+/seat\d/", "rae/*/", k) for k in keys})
    steps = sorted({r["step"] for r in before})
    files = (
        "byte for byte"
        if "byte-identical" in row.text(f"{folder}/compare-23-steps.txt")
        else "differ"
    )
    return [
        Check("steps compared", f"first {len(steps)} steps", "metric"),
        Check("keys that differ", f"equal except {', '.join(pattern)}"),
        Check(
            "their difference",
            "a last-digit difference" if worst < 1e-12 else f"differs by {worst:.1e}",
        ),
        Check("checkpoint files", f"magnet files {files}"),
    ]


@claim("recipes, schedules, optional modes and new rooms changed no result")
def recipes_refactor(row: Row) -> list[Check]:
    folder = "docs/results/refactor-bit-identity"
    before = row.metrics(f"{folder}/recipes-before.metrics.jsonl")
    after = row.metrics(f"{folder}/recipes-after.metrics.jsonl")
    keys, worst = differing(before, after)
    steps = sorted({r["step"] for r in before})
    compared = row.text(f"{folder}/compare-recipes.txt")
    weights = re.findall(r"^step_000020/(\S+\.safetensors): (\w+)", compared, re.MULTILINE)
    same = sum(verdict == "identical" for _, verdict in weights)
    return [
        Check("steps compared", f"first {len(steps)} steps", "metric"),
        Check("keys that differ", "every metric equal" if not keys else f"{len(keys)} keys differ"),
        Check("weights", f"{same} of {len(weights)} weight files byte for byte"),
    ] + ([Check("their difference", f"differs by {worst:.1e}")] if keys else [])


@claim("a baseline per identical full state")
def state_baseline(row: Row) -> list[Check]:
    folder = "docs/results/state-baseline"

    def ratios(name: str) -> tuple[list[dict], str]:
        steps = row.json(f"{folder}/{name}")["steps"]
        return steps, span([s["ratio"] for s in steps], 2) + "x"

    kuhn, kuhn_r = ratios("kuhn.json")
    trained, trained_r = ratios("kuhn-trained.json")
    ttt, ttt_r = ratios("tictactoe.json")
    brief, brief_r = ratios("tictactoe-brief-64games.json")
    checkpoint = row.json(f"{folder}/kuhn-trained.json")["checkpoint"]
    at_checkpoint = found(r"exploitability (0\.\d+)", checkpoint, folder).group(1)
    lowered = [round(100 * (1 - s["ratio"])) for s in trained]
    adds = all(s["ratio"] > 1 for s in kuhn + ttt + brief) and all(s["ratio"] < 1 for s in trained)
    test = row.text("tests/algo/test_state_baseline.py")
    test_ratios = [float(x) for x in re.findall(r"(0\.\d+) with \d+\)?", test)]

    def twins(steps: list[dict]) -> str:
        return span([100 * s["share_of_turns_with_a_twin"] for s in steps], 0) + "%"

    return [
        Check("trained Kuhn, variance removed", f"(by {min(lowered)}-{max(lowered)}%)", "claim"),
        Check("the others", "on TicTacToe it adds variance" if adds else "not only", "claim"),
        Check("untrained Kuhn", f"every turn with a twin): {kuhn_r} ({len(kuhn)} steps"),
        Check("untrained Kuhn states", f"{kuhn[0]['states']} states"),
        Check("checkpoint", f"(exploitability {at_checkpoint})"),
        Check("trained Kuhn", f"{trained_r} ({len(trained)} steps"),
        Check(
            "TicTacToe, 8 games", f"{twins(ttt)} of turns with a twin): {ttt_r} ({len(ttt)} steps"
        ),
        Check("TicTacToe, brief", f"({twins(brief)} with a twin): {brief_r} ({len(brief)} steps"),
        Check("test", f"{span(test_ratios, 2)}x the gradient variance"),
    ]


@claim("TicTacToe against sparring partners")
def sparring(row: Row) -> list[Check]:
    folder = "docs/results/tictactoe-brief"
    base, mid, end = (
        row.json(f"{folder}/{n}-greedy-200.json")["metrics"]
        for n in ("base", "sparring-step45", "sparring-step80")
    )
    p = "eval/TicTacToe-v0"

    def rate(m: dict, who: str, seat: int, kind: str, interval: bool = False) -> str:
        key = f"{p}/{who}/seat{seat}/{kind}_rate"
        low, high = m[f"{key}_low"], m[f"{key}_high"]
        return f"{m[key]:.2f}" + (f" [{low:.2f}, {high:.2f}]" if interval else "")

    minutes = (
        sum(
            r["time/total"]
            for r in row.metrics(f"{folder}/run-sparring.metrics.jsonl")
            if "time/total" in r
        )
        / 60
    )
    return [
        Check("minutes of steps", f"({minutes:.0f} min of steps)"),
        Check(
            "first mover",
            f"{rate(end, 'random', 0, 'win', True)} against random (untrained {rate(base, 'random', 0, 'win')})",
        ),
        Check(
            "second mover",
            f"{rate(end, 'random', 1, 'win', True)} ({rate(base, 'random', 1, 'win')})",
        ),
        Check(
            "draws vs perfect",
            f"{rate(end, 'optimal', 0, 'draw')} / {rate(end, 'optimal', 1, 'draw')}",
        ),
        Check("best draws", f"best: {rate(mid, 'optimal', 1, 'draw')} as second mover at step 45"),
        verdict(
            "targets: first mover 0.9 and second 0.7 against random, draws 0.5 against perfect",
            end[f"{p}/random/seat0/win_rate"] >= 0.9
            and end[f"{p}/random/seat1/win_rate"] >= 0.7
            and max(end[f"{p}/optimal/seat{s}/draw_rate"] for s in (0, 1)) >= 0.5,
            "targets 0.9 / 0.7 / 0.5 {}",
        ),
    ]


@claim("TicTacToe self-play (150 steps)")
def tictactoe_fsp(row: Row) -> list[Check]:
    data = row.json("docs/results/tictactoe-fsp/exploitability.json")
    plain, fsp = data["plain"]["150"]["exploitability"], data["FSP"]["150"]["exploitability"]
    both = f(plain) if f(plain) == f(fsp) else f"{f(plain)} / {f(fsp)}"
    return [
        Check("plain and FSP", f"{both} for plain and for FSP"),
        Check("base", f"base model {f(data['base']['exploitability'])}"),
    ]
