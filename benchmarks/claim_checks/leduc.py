"""The Leduc Hold'em claims: the embedded model's exact exploitability before training, on
the scale of the uniform policy and of the shipped CFR player (1,000 iterations)."""

from __future__ import annotations

from .core import Check, Row, claim

FOLDER = "docs/results/leduc-base"


@claim("the embedded model's Leduc play before training")
def leduc_base(row: Row) -> list[Check]:
    from spiral.agents.leduc_cfr import LeducCfrAgent
    from spiral.analysis.leduc import leduc_exploitability, uniform_dists

    cfr = LeducCfrAgent()
    reports = {
        style: row.json(f"{FOLDER}/base-{style}.json")["exploitability"]["LeducPoker-v0"]
        for style in ("focused", "brief")
    }
    brief = reports["brief"]
    second = sum(brief[f"br_gain_seat{s}_round2"] for s in (0, 1)) / brief["nash_conv"]
    uniform = leduc_exploitability(uniform_dists)["exploitability"]
    solved = leduc_exploitability(lambda ps: [cfr.action_probabilities(s) for s, _ in ps])
    return [
        *[Check(f"{style} prompt", f"{r['exploitability']:.4f}") for style, r in reports.items()],
        Check("uniform policy", f"{uniform:.4f}"),
        Check("CFR, 1,000 iterations", f"{solved['exploitability']:.4f}"),
        Check("share of the brief prompt's NashConv gained in round 2", f"{100 * second:.0f}%"),
    ]
