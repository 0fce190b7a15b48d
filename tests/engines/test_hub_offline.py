"""A hub id with no hub to ask: refused at once in one line when the model is not in the
Hugging Face cache, loaded from the cache without the hub library's retries when it is.
The hub is a local port bound and closed again, so nothing leaves this machine."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REVISION = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def closed_hub(tmp_path: Path) -> dict[str, str]:
    """The environment of a command whose hub is a closed local port and whose Hugging
    Face cache is an empty folder of its own."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(
        HF_ENDPOINT=f"http://127.0.0.1:{port}",
        HF_HOME=str(tmp_path / "hf"),
        SPIRAL_CACHE=str(tmp_path / "spiral-cache"),
        OMP_NUM_THREADS="1",
    )
    return env


def _spiral(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spiral", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard, not a measure
    )


@pytest.mark.timeout(150)
@pytest.mark.parametrize("command", ["eval", "train"])
def test_a_hub_id_missing_from_the_cache_is_one_line_without_the_hub(
    closed_hub: dict[str, str], tmp_path: Path, command: str
) -> None:
    """Before: a minute of the hub library's retries, its warnings, then a message whose
    cause ran over several lines."""
    if command == "eval":
        args = ["eval", "checkpoint=Qwen/Qwen3-0.6B", "opponents=random", "games=1"]
    else:
        args = ["train", "model_name=Qwen/Qwen3-0.6B", "max_steps=1", "lora_rank=4"]
        args += ["batch_size=2", f"log_path={tmp_path / 'run'}", "device=cpu"]
    done = _spiral(closed_hub, tmp_path, *args)
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "Qwen/Qwen3-0.6B is not in the Hugging Face cache" in err
    assert "cannot be reached" in err and "hf download Qwen/Qwen3-0.6B" in err


def _cache_model(tiny: Path, hub_cache: Path, repo_id: str) -> None:
    """`tiny` laid out as the hub library caches a download of `repo_id`."""
    repo = hub_cache / f"models--{repo_id.replace('/', '--')}"
    shutil.copytree(tiny, repo / "snapshots" / REVISION)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)


@pytest.mark.timeout(150)
def test_a_cached_hub_id_loads_from_the_cache_without_retries(
    closed_hub: dict[str, str], tmp_path: Path, tiny_llama: Path
) -> None:
    _cache_model(tiny_llama, Path(closed_hub["HF_HOME"]) / "hub", "spiral-tests/tiny")
    out = tmp_path / "report.json"
    done = _spiral(
        closed_hub,
        tmp_path,
        *["eval", "checkpoint=spiral-tests/tiny", "opponents=random", "games=1"],
        *["max_tokens=8", f"out={out}"],
    )
    assert done.returncode == 0, done.stderr
    assert out.is_file()
    assert "Retrying" not in done.stderr and "thrown while requesting" not in done.stderr
