"""Suite-wide settings and fixtures. The exactness checks (log-prob agreement to 1e-4,
bit-exact resume) are stated for fp32, so the suite runs as on a CPU without bf16, where
`dtype=auto` is fp32: here through the probe's `ASSUME = False`, in every subprocess
through oneDNN's own cap (`ONEDNN_MAX_CPU_ISA=AVX2`, set after this process's oneDNN has
seen the real CPU, so the tests here still reach its half-precision kernels). The tests
that ask for bfloat16 or float16 by name use the `half_precision` fixture, which lets a
half dtype run on any CPU: through oneDNN's kernels where it takes them, emulated by torch
elsewhere (exact, and fast enough for tiny models). The tiny models are built once per
session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from spiral.engines.torch import cpu
from spiral.testing import make_tiny_model

cpu.prepacks(torch.bfloat16)  # oneDNN meets this CPU before the cap below
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")
cpu.ASSUME = False


@pytest.fixture
def half_precision(monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16 and fp16 asked for by name run on this CPU whatever it has (`cpu.ASSUME = True`)."""
    monkeypatch.setattr(cpu, "ASSUME", True)


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny real Llama-shaped model, built once per test session."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "llama", arch="llama")


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny real Qwen3-shaped model, built once per test session."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "qwen3", arch="qwen3")


def _takes_files(folder: Path) -> bool:
    try:
        (folder / ".probe").touch()
    except OSError:
        return False
    (folder / ".probe").unlink()
    return True


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder that takes no new files: one without write permission, or, where
    permissions do not bind (root), /sys, which takes no new files from anyone."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        if _takes_files(folder):
            folder = Path("/sys")
            if not folder.is_dir() or _takes_files(folder):
                pytest.skip("no folder here refuses new files to this user")
        yield folder
    finally:
        (tmp_path / "read-only").chmod(0o755)
