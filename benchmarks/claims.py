"""Every number of the claims table in docs/results.md, recomputed from the data each row
cites, and README.md's headline numbers through the rows they come from.

    python benchmarks/claims.py [--results docs/results.md] [--readme README.md] [--root .]

One line per row: "agree", "DISAGREE" with what the data gives and what the table says,
"no data" (the row cites none, or a cited file is missing) or "no function" (no recompute
function is registered for the row: add one to benchmarks/claim_checks/). Exits 1 unless
every row and headline agrees.

The numbers docs/results.md states outside the table are checked against their pins
(`claim_checks/prose.py`: each pinned to where its value is in the data the text cites);
`--pin` pins new numbers and drops the pins of numbers the text no longer has.

A recompute function per row (`benchmarks/claim_checks/`, registered with `@claim(start
of the claim's text)`) returns (label, value formatted as the table writes it) pairs.
Each value must appear in the row's cell, and every decimal number of the claim and value
cells must be one of the recomputed values: a number no data backs is a disagreement too.
Targets a claim is judged against are the one kind of constant the functions return, and
their labels say so. A verdict the cells state ("met", "missed") must come from a check
that judged the recomputed number against its target (`core.verdict`), as a number must.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from claim_checks import (  # noqa: E402,F401
    cpu_classes,
    engine,
    engine_more,
    kuhn,
    kuhn_levers,
    leduc,
    misc,
)
from claim_checks.core import ROWS, Outcome, read_table, run_row  # noqa: E402
from claim_checks.prose import check_prose, described, pin  # noqa: E402
from claim_checks.readme import check_readme  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def check(results: Path, readme: Path | None = None, root: Path = ROOT) -> list[Outcome]:
    """The outcome of every claims row, then of every README headline, then the prose's."""
    table = read_table(results, root)
    outcomes = [run_row(row, ROWS) for row in table.rows]
    if readme is not None:
        outcomes += check_readme(readme, table)
    return [*outcomes, check_prose(results, root)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=ROOT / "docs" / "results.md")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument("--root", type=Path, default=ROOT, help="where the cited paths live")
    parser.add_argument(
        "--pin", action="store_true", help="pin the prose's new numbers (see claim_checks/prose.py)"
    )
    args = parser.parse_args(argv)
    for name, path in (("--results", args.results), ("--readme", args.readme)):
        if not path.is_file():
            print(f"claims: {name} {path} is not a file; pass the markdown file to check")
            return 2
    if args.pin:
        added, dropped = pin(args.results, args.root)
        for sign, pins in (("-", dropped), ("+", added)):
            for key, value in pins:
                print(f"{sign} {described(key, value)}")
        print(f"claims: {len(added)} number(s) pinned, {len(dropped)} pin(s) dropped; read them")
    outcomes = check(args.results, args.readme, args.root)
    for o in outcomes:
        print(f"{o.status:<11} {o.name}" + ("".join(f"\n{'':12}{d}" for d in o.details)))
    bad = [o for o in outcomes if o.status != "agree"]
    print(f"{len(outcomes) - len(bad)} of {len(outcomes)} agree")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
