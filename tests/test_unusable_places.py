"""Places Spiral reads models from or writes results to that cannot take them: the
embedded model's cache (SPIRAL_CACHE) and the Hugging Face cache as a file, a folder
that takes no new files or a disk without room; standard output on a full device; a run
folder whose name no checkpoint writer takes. Each is one line before the work, or the
work is kept."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from spiral.cli import main as cli_main
from spiral.engines import embedded, hub
from spiral.engines.torch import loading

EVAL_EMBEDDED = ["eval", "checkpoint=embedded", "opponents=random", "games=1", "max_tokens=8"]


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@pytest.fixture
def no_conversion(monkeypatch: pytest.MonkeyPatch) -> None:
    def converted(*args: object) -> None:
        raise AssertionError("the embedded model was converted into an unusable cache")

    monkeypatch.setattr(embedded, "_convert", converted)


@pytest.mark.parametrize("kind", ["a file", "read-only", "no room"])
def test_a_spiral_cache_that_cannot_take_the_embedded_model_is_one_line_before_converting(
    tmp_path: Path,
    read_only_folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_conversion: None,
    kind: str,
) -> None:
    """Before: NotADirectoryError / PermissionError tracebacks, or a full disk found by
    the conversion half a minute in."""
    cache = {"a file": tmp_path / "file", "read-only": read_only_folder, "no room": tmp_path}
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("SPIRAL_CACHE", str(cache[kind]))
    if kind == "no room":
        usage = namedtuple("usage", "total used free")
        monkeypatch.setattr(embedded.shutil, "disk_usage", lambda _: usage(2**30, 2**30, 2**20))
    assert cli_main(EVAL_EMBEDDED) == 2
    err = _one_line(capsys)
    assert str(cache[kind]) in err and "SPIRAL_CACHE" in err
    assert "1 MB free" in err if kind == "no room" else "cannot write" in err


def test_a_disk_that_fills_during_the_conversion_is_one_line_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fills(gguf: Path, out_dir: Path) -> None:
        (out_dir / "model.safetensors").write_bytes(b"half")
        raise Exception("Error while serializing: No space left on device (os error 28)")

    usage = namedtuple("usage", "total used free")
    monkeypatch.setenv("SPIRAL_CACHE", str(tmp_path))
    monkeypatch.setattr(embedded, "_convert", fills)  # the room seen first, then not there
    monkeypatch.setattr(embedded.shutil, "disk_usage", lambda _: usage(2**40, 0, 2**40))
    assert cli_main(EVAL_EMBEDDED) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert said[0].startswith("converting the embedded") and len(said) == 2, said
    err = said[1]
    assert os.strerror(errno.ENOSPC) in err and "SPIRAL_CACHE" in err
    assert list((tmp_path / "models").iterdir()) == []  # the half-written copy is gone


def test_a_full_disk_under_the_embedded_models_cache_stops_train_before_the_run_starts(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_conversion: None,
) -> None:
    usage = namedtuple("usage", "total used free")
    monkeypatch.setenv("SPIRAL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(embedded.shutil, "disk_usage", lambda _: usage(2**30, 2**30, 0))
    argv = ["train", "model_name=embedded", "max_steps=1", "lora_rank=4", "batch_size=2"]
    assert cli_main([*argv, f"log_path={tmp_path / 'run'}", "env_ids=KuhnPokerSingle-v0"]) == 2
    assert "0 MB free" in _one_line(capsys)
    assert not (tmp_path / "run").exists()  # refused with the machine's checks, before the run


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_hugging_face_cache_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    """Before: a NotADirectoryError from reading the hub token, taken for the hub being
    unreachable (the hub library reads its settings when imported: a subprocess)."""
    (tmp_path / "file").write_text("not a folder")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(HF_HOME=str(tmp_path / "file"), HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}")
    done = subprocess.run(
        [sys.executable, "-m", "spiral", "eval", "checkpoint=Qwen/Qwen3-0.6B", "games=1"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard
    )
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"HF_HOME={tmp_path / 'file'} cannot be the Hugging Face cache" in err


def test_a_download_into_a_cache_that_takes_no_files_is_refused_before_it_starts(
    read_only_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hub answers (stood in for: nothing leaves this machine) but the cache folder
    cannot take the download."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(read_only_folder / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "_unreachable", lambda repo_id: None)
    with pytest.raises(hub.CacheUnusable, match="cannot download owner/model") as refused:
        hub.hub_options("owner/model")
    assert "\n" not in str(refused.value)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("out", ["a file", "/dev/full"])
def test_an_evaluation_with_stdout_on_a_full_device_keeps_its_results(
    tiny_llama: Path, tmp_path: Path, out: str
) -> None:
    """`spiral eval ... > /dev/full`. Before: a traceback at the first line printed,
    before any game, and no report."""
    report = tmp_path / "report.json" if out == "a file" else Path(out)
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "spiral", "eval", f"checkpoint={tiny_llama}"]
            + ["opponents=random", "games=1", "max_tokens=8", f"out={report}"],
            stdout=full,
            stderr=subprocess.PIPE,
            cwd=tmp_path,
            text=True,
            timeout=300,
        )
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    if out == "a file":
        assert done.returncode == 0
        assert "standard output refused the results" in err and str(report) in err
        assert json.loads(report.read_text())["metrics"]
    else:
        assert done.returncode == 2 and "standard output refused them too" in err


def test_a_run_folder_whose_name_is_not_utf8_is_refused_before_the_model_loads(
    tiny_llama: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before: the run trained its first step, then every save failed on the name
    (UnicodeEncodeError from the tokenizer's writer), a traceback each time."""
    run = os.fsdecode(os.fsencode(tmp_path) + b"/run-\xff")
    try:
        os.mkdir(run)
        os.rmdir(run)
    except (OSError, UnicodeError):
        pytest.skip("this file system takes only UTF-8 names")

    def loaded(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model loaded for a run that can never save")

    monkeypatch.setattr(loading, "_load_causal_lm", loaded)
    argv = ["train", f"model_name={tiny_llama}", "max_steps=1", "lora_rank=4", "batch_size=2"]
    assert cli_main([*argv, f"log_path={run}", "env_ids=KuhnPokerSingle-v0"]) == 2
    err = _one_line(capsys)
    assert "not UTF-8" in err and "log_path=" in err
    assert not os.path.exists(run)
