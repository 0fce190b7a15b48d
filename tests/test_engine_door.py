"""Keeps the door to the engines closed: the training loop and the commands reach a
learner only through the `Learner` protocol (spiral/engines/base.py).

- No class under spiral/engines/ forwards unknown attributes (`__getattr__`), so a
  wrapper (data-parallel ranks, vLLM samplers) offers exactly the protocol.
- Nothing under spiral/train/ names a concrete engine class (a `...Learner`,
  `...Sampler`, `...Engine` or `...Copies` class that an engine defines): engines are
  built by the registry and wrapped by functions with one job (`engines.torch.parallel.on_ranks`).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "spiral"
PROTOCOLS = {"Learner", "Sampler", "FrozenCopies", "LearnerWrapper"}
SUFFIXES = ("Learner", "Sampler", "Engine", "Copies")


def _classes(tree: ast.AST) -> list[ast.ClassDef]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]


def _concrete_engine_classes() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "engines").rglob("*.py"):
        for cls in _classes(ast.parse(path.read_text(encoding="utf-8"))):
            if cls.name.endswith(SUFFIXES) and cls.name not in PROTOCOLS:
                names.add(cls.name)
    return names


def forwarding_classes(source: str) -> list[str]:
    """Classes of `source` that define `__getattr__`."""
    return [
        cls.name
        for cls in _classes(ast.parse(source))
        if any(
            isinstance(item, ast.FunctionDef) and item.name == "__getattr__" for item in cls.body
        )
    ]


def named(source: str, classes: set[str]) -> set[str]:
    """Which of `classes` `source` names: as a name, an attribute or an imported name."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id in classes:
            found.add(node.id)
        elif isinstance(node, ast.Attribute) and node.attr in classes:
            found.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            found.update(a.name for a in node.names if a.name in classes)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.update(c for c in classes if f"`{c}`" in node.value)
    return found


def test_the_engines_define_concrete_classes_to_look_for() -> None:
    classes = _concrete_engine_classes()
    assert {"TorchLearner", "DataParallelLearner", "FullyShardedLearner"} <= classes
    assert {"VllmSampledLearner", "TinkerLearner", "TorchSampler"} <= classes


def test_no_engine_class_forwards_attributes() -> None:
    offenders = {
        str(path.relative_to(ROOT)): forwarding_classes(path.read_text(encoding="utf-8"))
        for path in (ROOT / "engines").rglob("*.py")
    }
    assert {path: found for path, found in offenders.items() if found} == {}


def test_train_names_no_concrete_engine_class() -> None:
    classes = _concrete_engine_classes()
    offenders = {
        str(path.relative_to(ROOT)): sorted(named(path.read_text(encoding="utf-8"), classes))
        for path in (ROOT / "train").rglob("*.py")
    }
    assert {path: found for path, found in offenders.items() if found} == {}


def test_the_checks_find_what_they_look_for() -> None:
    wrapper = (
        "class W:\n    def __getattr__(self, name):\n        return getattr(self.inner, name)\n"
    )
    assert forwarding_classes(wrapper) == ["W"]
    assert forwarding_classes("def __getattr__(name):\n    return name\n") == []  # PEP 562
    classes = {"TorchLearner", "DataParallelLearner"}
    assert named("from spiral.engines.torch.learner import TorchLearner\n", classes) == {
        "TorchLearner"
    }
    assert named("if isinstance(x, m.DataParallelLearner):\n    pass\n", classes) == {
        "DataParallelLearner"
    }
    assert named("learner = registry.learner('torch', cfg)\n", classes) == set()
