"""The docs hold: every path they name exists, result folders are named by what they hold,
and the project speaks of itself, never of how its work was organised."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SPOKEN = ("README.md", "Makefile", "docs", "spiral", "tests", "benchmarks", "examples")
# Words about the making, not the product: numbered stretches of work and tickets, which
# machine was on loan, the tools of the workplace, what a piece of work had to show, the
# calls and budgets of borrowed machines, whose machines the Makefile was written for.
# Built from parts, so this file's own patterns do not match themselves.
MAKING = re.compile(
    r"\b(session|sessions|issue|issues|ticket)[ -]#?\d"
    r"|\b" + "le" + r"nt\b"
    r"|" + "device" + r" tool"
    r"|" + "work" + r" period"
    r"|\bmust" + r"[- ]show\b"
    r"|defaults to \$" + r"OUT\b"
    r"|\ba call " + r"cut short"
    r"|\bGPU " + r"calls?\b"
    r"|\bbefore the " + r"call[,.]"
    r"|\btwo-hour " + r"budget"
    r"|\bour " + r"dev\b"
    r"|\bdev" + r"/CI\b",
    re.IGNORECASE,
)
# A markdown link or image with a target that is not a URL or an anchor: [text](target).
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
PATH = re.compile(r"(?<![\w/.-])((?:docs|benchmarks|examples|spiral|tests)/[\w./+-]*[\w/])")


def _tracked(*paths: str) -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "--", *paths], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / p for p in out]


def test_every_path_the_docs_name_exists() -> None:
    missing = []
    for guide in GUIDES:
        for line_no, line in enumerate(guide.read_text(encoding="utf-8").splitlines(), 1):
            for found in PATH.findall(line):
                if any(c in found for c in "*<>") or "NAME" in found:
                    continue  # a pattern or a placeholder, not a path
                if not (ROOT / found.rstrip(".")).exists():
                    missing.append(f"{guide.relative_to(ROOT)}:{line_no}: {found}")
    assert not missing, "\n".join(missing)


def _markdown() -> list[Path]:
    """README.md and every markdown file under docs/, result folders included."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_link_and_image_the_markdown_names_exists() -> None:
    missing = []
    for doc in _markdown():
        for line_no, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for target in LINK.findall(line):
                if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("#"):
                    continue  # a URL or an anchor in the same page
                if not (doc.parent / target.split("#")[0]).exists():
                    missing.append(f"{doc.relative_to(ROOT)}:{line_no}: {target}")
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize(
    "text",
    [
        "![curve](no-such-image.png)",
        "see [the notes](docs/no-such-page.md#part)",
        '[a title](missing.md "title")',
        "![](<missing.png>)",
    ],
)
def test_a_missing_link_target_is_found(text: str) -> None:
    (target,) = LINK.findall(text)
    assert not (ROOT / target.split("#")[0]).exists()


@pytest.mark.parametrize(
    "text",
    [
        "the must" + "-show of <= 0.05",
        "OUTPUT_DIR defaults to " + "$OUT, else",
        "so a call " + "cut short still brings back",
        "left for the next GPU " + "call",
        "inside the two-hour " + "budget",
        "on our de" + "v/CI machines",
        "Before the " + "call, the paths were run",
    ],
)
def test_words_about_the_making_are_found(text: str) -> None:
    assert MAKING.search(text)


def test_no_result_is_named_after_a_work_period() -> None:
    named = [p for p in _tracked("docs") if re.search(r"-s\d+$", p.name.split(".")[0])]
    named += [p for p in (ROOT / "docs").rglob("*") if p.is_dir() and re.search(r"-s\d+$", p.name)]
    assert not named, named


@pytest.mark.parametrize("where", SPOKEN)
def test_the_project_speaks_only_of_itself(where: str) -> None:
    found = []
    for path in _tracked(where):
        if path.suffix in (".jsonl", ".png", ".safetensors") or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for line_no, line in enumerate(text.splitlines(), 1):
            if MAKING.search(line):
                found.append(f"{path.relative_to(ROOT)}:{line_no}: {line.strip()[:100]}")
    assert not found, "\n".join(found[:20])


RUN_FOLDERS = ("eval", "learner", "averaged", "magnet", "step_NNNNNN", "pool", "checkpoints")


def test_every_module_and_room_the_architecture_names_exists() -> None:
    """docs/architecture.md names modules and rooms relative to the section they sit in
    (`config.py`, `torch/parallel/sharded.py`, `actors/`): each must be a file or folder of
    the package, wherever its path ends so."""
    files = {p.relative_to(ROOT).as_posix() for p in (ROOT / "spiral").rglob("*.py")}
    folders = {p.relative_to(ROOT).as_posix() + "/" for p in (ROOT / "spiral").rglob("*")}
    folders = {f for f in folders if (ROOT / f).is_dir()}
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = []
    for token in re.findall(r"`([\w/]+(?:\.py|/))`", text):
        if token.startswith(("docs/", "benchmarks/", "tests/", "examples/", "RUN/", "runs/")):
            continue  # checked by the test above, or a run's folder
        if token.split("/")[0] in RUN_FOLDERS:
            continue  # a folder of a run or checkpoint, not of the package
        found = files if token.endswith(".py") else folders
        if not any(f == token or f.endswith("/" + token) for f in found):
            missing.append(token)
    assert not missing, f"docs/architecture.md names what spiral/ lacks: {sorted(set(missing))}"
