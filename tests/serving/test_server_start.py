"""`spiral serve` at start-up: weights that hold NaN or inf are refused in one line
before the server listens (else every request would be a 500), and a checkpoint that
does not exist is said before the address is checked, so the answer does not depend
on whether another process holds the default port."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
import torch
from evaluation_cli import free_port, tiny_model_dir
from safetensors.torch import load_file, save_file

from spiral.cli import main as cli_main


def _broken_copy(tmp_path: Path, value: float, every: bool) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir(), folder)
    weights = load_file(folder / "model.safetensors")
    name = sorted(k for k in weights if "mlp" in k)[0]
    for key in weights if every else [name]:
        weights[key] = torch.full_like(weights[key], value)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


@pytest.mark.parametrize(
    ("value", "every"), [(float("nan"), True), (float("nan"), False), (float("inf"), False)]
)
def test_weights_that_hold_nan_or_inf_are_refused_before_listening(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    value: float,
    every: bool,
) -> None:
    folder = _broken_copy(tmp_path, value, every)
    monkeypatch.setattr(
        "spiral.serving.server.run_server",
        lambda *a: pytest.fail("the server listened over weights that hold NaN or inf"),
    )
    capsys.readouterr()  # what building the tiny model printed
    code = cli_main(["serve", f"checkpoint={folder}", f"port={free_port()}", "device=cpu"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "NaN or inf" in err, err
    assert "Traceback" not in err


def test_healthy_weights_pass_the_start_check(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    served: list[str] = []
    monkeypatch.setattr(
        "spiral.serving.server.run_server", lambda app, host, port: served.append(host)
    )
    port = free_port()
    assert cli_main(["serve", f"checkpoint={tiny_model_dir()}", f"port={port}", "device=cpu"]) == 0
    assert served == ["127.0.0.1"]
    assert f"127.0.0.1:{port}" in capsys.readouterr().out


def test_a_missing_checkpoint_is_said_whatever_holds_the_port(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        missing = tmp_path / "missing"
        assert cli_main(["serve", f"checkpoint={missing}", f"port={port}"]) == 2
        assert "does not exist" in capsys.readouterr().err
