"""Keeps the layers pointing one way: a package imports only packages of a lower rank.

The ranks are the table in docs/architecture.md ("Layers and import direction"):
types < games < prompts, algo, report < engines < agents < rollout < evaluation < train
< cli. Same-rank packages must not import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RANK = {
    "types": 0,
    "errors": 0,
    "testing": 0,  # public tiny-model makers for tests and benchmarks: imports nothing of spiral
    "args": 1,
    "checkpoints": 1,  # checkpoint integrity (manifests): imports errors only
    "games": 1,
    "prompts": 2,
    "algo": 2,
    "analysis": 2,  # game theory on policy tables: imports games and types only
    "report": 2,
    "engines": 3,
    "agents": 4,
    "rollout": 5,
    "evaluation": 6,
    "serving": 6,
    "train": 7,
    "bench": 8,
    "cli": 8,
}
ROOT = Path(__file__).resolve().parents[1] / "spiral"


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "spiral" or len(parts) < 2:
        return None
    return parts[1]


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module == "spiral" and node.level == 0:
            # from spiral import games (the package's own __version__ is no layer)
            found.extend(f"spiral.{a.name}" for a in node.names if not a.name.startswith("__"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


def _package_files() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if p.parent != ROOT or p.stem in RANK)


@pytest.mark.parametrize("path", _package_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path: Path) -> None:
    rel = path.relative_to(ROOT)
    own = rel.parts[0] if len(rel.parts) > 1 else rel.stem
    assert own in RANK, f"{rel}: package {own!r} has no rank; add it to RANK and the docs"
    for module in _imports(path):
        target = _layer(module)
        if target is None or target == own:
            continue
        assert target in RANK, f"{rel} imports unknown layer {module}"
        assert RANK[target] < RANK[own], (
            f"{rel} (layer {own}, rank {RANK[own]}) imports {module} "
            f"(layer {target}, rank {RANK[target]}): imports must point to lower layers"
        )


def test_every_layer_exists() -> None:
    present = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("_")}
    present |= {p.stem for p in ROOT.glob("*.py") if p.stem in RANK}
    missing = {name for name in RANK if name not in present}
    assert not missing, f"layers named in the rank table but absent: {missing}"


def _module_name(path: Path) -> str:
    parts = ("spiral", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_graph() -> dict[str, set[str]]:
    """module -> the spiral modules it imports (any import statement, lazy ones too:
    a circle through a function-level import is still a circle in the design)."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for module in _imports(path):
            if module in modules:
                targets.add(module)
        graph[name] = targets
    return graph


def _cycle_from(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path start -> ... -> start staying inside start's package, or None."""
    package = ".".join(start.split(".")[:2])
    stack, seen = [(start, [start])], {start}
    while stack:
        node, path = stack.pop()
        for nxt in graph.get(node, ()):
            if ".".join(nxt.split(".")[:2]) != package:
                continue
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def test_no_import_circles_inside_a_package() -> None:
    graph = _module_graph()
    circles = [c for m in sorted(graph) if (c := _cycle_from(graph, m)) is not None]
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles[:5])


def test_the_circle_check_sees_a_circle() -> None:
    graph = {"spiral.x.a": {"spiral.x.b"}, "spiral.x.b": {"spiral.x.a"}, "spiral.x.c": set()}
    assert _cycle_from(graph, "spiral.x.a") == ["spiral.x.a", "spiral.x.b", "spiral.x.a"]
    assert _cycle_from(graph, "spiral.x.c") is None


MAX_LINES = 450  # a file a reader can hold: split by concern past it


def test_no_file_in_the_package_is_over_450_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in ROOT.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these by concern: {long}"


def _testing_names_used(path: Path) -> set[str]:
    """The names `path` takes from spiral.testing (`from spiral.testing import x`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "spiral.testing"
        for a in node.names
    }


def test_the_product_and_the_benchmarks_use_only_the_public_makers() -> None:
    """spiral.testing is public for users' own tests: its makers are `__all__`. The package,
    the benchmarks and the examples take nothing else from it; the test suite's own
    fixtures live in tests/ and the makers import no test framework."""
    import spiral.testing

    public = set(spiral.testing.__all__)
    repo = ROOT.parent
    used = {
        str(p.relative_to(repo)): names - public
        for where in ("spiral", "benchmarks", "examples")
        for p in (repo / where).rglob("*.py")
        if (names := _testing_names_used(p))
    }
    assert {k: v for k, v in used.items() if v} == {}
    assert not {"pytest", "hypothesis"} & set(_imports(ROOT / "testing.py"))


def _benchmark_graph() -> dict[str, set[str]]:
    """benchmarks/: script -> the scripts beside it that it imports (by bare name, as a
    script run from that folder does; the claim checks' package counts as one node)."""
    folder = ROOT.parent / "benchmarks"
    scripts = {p.stem: p for p in folder.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in scripts.items():
        graph[f"benchmarks.scripts.{name}"] = {
            f"benchmarks.scripts.{module.split('.')[0]}"
            for module in _imports(path)
            if module.split(".")[0] in scripts
        }
    return graph


def test_no_import_circles_among_the_benchmark_scripts() -> None:
    graph = _benchmark_graph()
    assert graph, "no benchmark scripts found"
    circles = [c for m in sorted(graph) if (c := _cycle_from(graph, m)) is not None]
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles[:5])
