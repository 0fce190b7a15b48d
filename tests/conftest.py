"""Suite-wide settings and fixtures. The exactness checks (log-prob agreement to 1e-4,
bit-exact resume) are stated for fp32, so `dtype=auto` resolves as on a CPU without
native bf16 here and in every subprocess; the bf16 tests ask for bfloat16 by name. The
tiny models are built once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spiral.engines.loading import CPU_BF16_ENV
from spiral.testing import make_tiny_model

os.environ[CPU_BF16_ENV] = "0"


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny real Llama-shaped model, built once per test session."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "llama", arch="llama")


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny real Qwen3-shaped model, built once per test session."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "qwen3", arch="qwen3")
