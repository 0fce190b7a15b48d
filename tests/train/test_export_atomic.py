"""`spiral export` never mixes models: `out` is only ever a whole export. A folder that
already holds files (another export's adapter, a user's config.json) is refused unless
`replace=true`, which replaces it whole; an `out` that cannot be written is refused
before any model loads; a failed export leaves `out` as it was; and a folder that is
not exactly what an export wrote (half-written, truncated, another model's files beside
it) is refused by the loaders in one line."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from spiral.checkpoints.manifest import COMPLETE
from spiral.cli import main as cli_main
from spiral.engines.model_folder import (
    RUN_FILE,
    IncompleteModelFolder,
    model_folder_problems,
    safetensors_problem,
)
from spiral.errors import UsageError
from spiral.train.config import parse_config
from spiral.train.export import main as export_main
from spiral.train.loop import train
from spiral.train.setup import build_setup, make_learner_factory

IDS = [1, 17, 42, 99, 7, 250, 3]  # any token ids of the tiny model's 512


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-step LoRA run with a checkpoint at each step: step 1's adapter is "another
    model" beside step 2's export."""
    from spiral.testing import make_tiny_model

    model = make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
    run = tmp_path_factory.mktemp("export") / "run"
    cfg = parse_config(
        [
            f"model_name={model}",
            "env_ids=KuhnPokerSingle-v0",
            "batch_size=4",
            "max_steps=2",
            "max_tokens=6",
            "lora_rank=4",
            "learning_rate=5e-2",
            "eval_every=0",
            "save_every=1",
            "template=chat",
            f"log_path={run}",
        ]
    )
    train(cfg, build_setup(cfg), make_learner_factory(cfg), log=lambda _: None)
    return run


@pytest.fixture(scope="module")
def exported(run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run exported into a folder that exists and is empty (allowed)."""
    out = tmp_path_factory.mktemp("exported") / "merged"
    out.mkdir()
    assert export_main([f"checkpoint={run}", f"out={out}"]) == 0
    return out


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def _leftovers(parent: Path) -> list[str]:
    """Hidden staging or set-aside folders an export left beside its `out`."""
    return sorted(p.name for p in parent.iterdir() if ".export-" in p.name or ".old-" in p.name)


def _one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def _logprobs(folder: Path) -> torch.Tensor:
    """The log-probs Spiral's loader gives for IDS from a model or adapter folder."""
    from spiral.engines.loading import ModelConfig
    from spiral.engines.torch.loading import load_model_and_tokenizer

    config = ModelConfig(model=str(folder), lora_rank=0, device="cpu", dtype="float32")
    model, _ = load_model_and_tokenizer(config, trained=False)
    model.eval()
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([IDS])).logits[0].float(), -1)


def _other_adapter(run: Path, out: Path) -> None:
    """Step 1's adapter files in `out`, as another export or run would leave them."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copy(run / "checkpoints" / "step_000001" / "learner" / name, out / name)


def test_a_folder_holding_another_models_adapter_is_refused_and_kept(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "merged"
    _other_adapter(run, out)
    (out / "config.json").write_text('{"mine": true}')  # a user's own file
    before = _snapshot(out)
    err = _one_line(capsys, ["export", f"checkpoint={run}", f"out={out}"])
    assert "is not empty" in err and "replace=true" in err and "adapter_config.json" in err
    assert _snapshot(out) == before and not _leftovers(tmp_path)


def test_replace_swaps_the_folder_whole_and_loads_the_checkpoints_weights(
    run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "merged"
    _other_adapter(run, out)
    (out / "notes.txt").write_text("from before")
    assert export_main([f"checkpoint={run}", f"out={out}", "replace=true"]) == 0
    names = {p.name for p in out.iterdir()}
    assert "adapter_config.json" not in names and "adapter_model.safetensors" not in names
    assert "notes.txt" not in names and {"config.json", COMPLETE, RUN_FILE} <= names
    assert not _leftovers(tmp_path)
    checkpoint = _logprobs(run / "checkpoints" / "step_000002" / "learner")
    assert torch.allclose(_logprobs(out), checkpoint, atol=1e-5)
    # The stale adapter was another model: had it been loaded, the numbers would differ.
    other = _logprobs(run / "checkpoints" / "step_000001" / "learner")
    assert not torch.allclose(other, checkpoint, atol=1e-3)


_NAME = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"),
    min_size=1,
    max_size=20,
).filter(lambda n: n not in (".", ".."))


@settings(max_examples=25, deadline=None)
@given(names=st.lists(_NAME, min_size=1, max_size=5, unique=True))
def test_any_file_already_in_out_is_refused_in_one_line_and_left_alone(
    run: Path, names: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as parent:
        out = Path(parent) / "out"
        out.mkdir()
        for name in names:
            (out / name).write_text(name, encoding="utf-8")
        before = _snapshot(out)
        with pytest.raises(UsageError, match="is not empty") as err:
            export_main([f"checkpoint={run}", f"out={out}"])
        assert "\n" not in str(err.value)
        assert _snapshot(out) == before and os.listdir(parent) == ["out"]


def _no_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    def loaded(*_: object, **__: object) -> None:
        raise AssertionError("a model was loaded before out= was checked")

    monkeypatch.setattr("spiral.engines.torch.learner.TorchLearner.__init__", loaded)


def test_an_out_that_is_a_file_is_refused_before_any_model_loads(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_model_loads(monkeypatch)
    file = tmp_path / "model.txt"
    file.write_text("mine")
    assert "is a file" in _one_line(capsys, ["export", f"checkpoint={run}", f"out={file}"])
    err = _one_line(capsys, ["export", f"checkpoint={run}", f"out={file / 'merged'}"])
    assert "is a file, not a folder" in err
    assert file.read_text() == "mine" and sorted(os.listdir(tmp_path)) == ["model.txt"]


def test_an_out_that_cannot_be_written_is_refused_before_any_model_loads(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_model_loads(monkeypatch)
    if not Path("/sys/kernel").is_dir():
        pytest.skip("no /sys on this machine")
    for out in ("/sys/kernel/spiral-merged", "/sys/kernel/spiral-missing/merged"):
        err = _one_line(capsys, ["export", f"checkpoint={run}", f"out={out}"])
        assert "cannot write" in err and not Path(out).exists()
    if os.geteuid() == 0:
        return  # root writes into a read-only folder anyway
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    err = _one_line(capsys, ["export", f"checkpoint={run}", f"out={locked / 'merged'}"])
    assert "cannot write" in err and not os.listdir(locked)


def test_replace_never_deletes_the_checkpoint_it_exports(
    run: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_model_loads(monkeypatch)
    before = sorted(p.name for p in run.iterdir())
    err = _one_line(capsys, ["export", f"checkpoint={run}", f"out={run}", "replace=true"])
    assert "which the export reads" in err and sorted(p.name for p in run.iterdir()) == before


def test_a_failed_export_leaves_out_as_it_was(
    run: Path,
    exported: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def disk_full(*_: object) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("spiral.train.export.model_card", disk_full)
    new = tmp_path / "new"
    err = _one_line(capsys, ["export", f"checkpoint={run}", f"out={new}"])
    assert "No space left" in err and "unchanged" in err
    assert not new.exists() and not _leftovers(tmp_path)
    old = tmp_path / "old"
    shutil.copytree(exported, old)
    before = _snapshot(old)
    _one_line(capsys, ["export", f"checkpoint={run}", f"out={old}", "replace=true"])
    assert _snapshot(old) == before and not _leftovers(tmp_path)


def test_an_export_that_comes_out_incomplete_is_not_moved_into_place(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from spiral.engines.torch.learner import TorchLearner

    real = TorchLearner.export

    def cut_short(self: TorchLearner, path: Path) -> None:
        real(self, path)
        weights = Path(path) / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:-100])

    monkeypatch.setattr(TorchLearner, "export", cut_short)
    out = tmp_path / "merged"
    err = _one_line(capsys, ["export", f"checkpoint={run}", f"out={out}"])
    assert "incomplete" in err and "model.safetensors" in err
    assert not out.exists() and not _leftovers(tmp_path)


def _half_written(folder: Path, run: Path) -> None:
    (folder / COMPLETE).unlink()


def _truncated(folder: Path, run: Path) -> None:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])


def _killed(folder: Path, run: Path) -> None:
    """What a staging folder holds when its export is killed at once: the run file."""
    for path in folder.iterdir():
        if path.name != RUN_FILE:
            path.unlink()


DAMAGE = {
    "half-written": (_half_written, "half-written"),
    "truncated": (_truncated, "model.safetensors has"),
    "another adapter": (
        lambda folder, run: _other_adapter(run, folder),
        "files the export did not write: adapter_config.json, adapter_model.safetensors",
    ),
    "killed export": (_killed, "half-written"),
}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_loaders_refuse_a_folder_the_export_did_not_finish_in_one_line(
    run: Path, exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    from spiral.engines.loading import resolve_model_path

    folder = tmp_path / "merged"
    shutil.copytree(exported, folder)
    damage, said = DAMAGE[kind]
    damage(folder, run)
    with pytest.raises(IncompleteModelFolder, match=said):
        resolve_model_path(str(folder))
    err = _one_line(capsys, ["eval", f"checkpoint={folder}", "opponents=random", "games=1"])
    if kind == "killed export":  # no config.json yet: eval does not take it for a model
        assert "is a folder but not a run" in err
    else:
        assert said in err and "export it again" in err


def test_a_whole_export_passes_the_checks_and_an_unsealed_folder_is_not_judged(
    exported: Path, tmp_path: Path
) -> None:
    from spiral.engines.loading import resolve_model_path

    assert model_folder_problems(exported) == []
    assert resolve_model_path(str(exported)) == str(exported)
    # An export written before exports were sealed (no `sealed` in its run file) loads as is.
    old = tmp_path / "old"
    shutil.copytree(exported, old)
    (old / RUN_FILE).write_text('{"config": {}, "step": 2, "weights": "live"}')
    (old / COMPLETE).unlink()
    assert resolve_model_path(str(old)) == str(old)


def test_safetensors_headers_are_read_for_what_they_promise(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    path = tmp_path / "w.safetensors"
    save_file({"a": torch.zeros(4, 4), "b": torch.ones(3)}, str(path))
    assert safetensors_problem(path) is None
    whole = path.read_bytes()
    path.write_bytes(whole[:-4])
    assert "bytes" in (safetensors_problem(path) or "")
    path.write_bytes(whole[:6])
    assert "no readable safetensors header" in (safetensors_problem(path) or "")
    path.write_bytes((10**9).to_bytes(8, "little") + b"{}")
    assert "cut short" in (safetensors_problem(path) or "")


def test_the_run_file_is_the_one_the_checkpoint_agents_read() -> None:
    from spiral.agents.model_agent import RUN_FILE as AGENTS_RUN_FILE

    assert RUN_FILE == AGENTS_RUN_FILE


def _mounted(folder: Path) -> bool:
    """Mount a small tmpfs on `folder` where this user may (root); False otherwise."""
    import subprocess

    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(folder)],
                          capture_output=True, check=False)  # fmt: skip
    return done.returncode == 0


def test_an_empty_mount_point_takes_the_export_written_inside_it(
    run: Path, exported: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container volume or mounted disk cannot be renamed onto: the export is staged
    inside it and moved up, the marker last, and loads as the same model."""
    import subprocess

    import spiral.train.export as export

    out = tmp_path / "volume"
    out.mkdir()
    mounted = _mounted(out)
    if not mounted:  # a stand-in where mounting is not allowed
        monkeypatch.setattr(export, "_mount_point", lambda folder: folder == out)
    try:
        assert export._mount_point(out)
        assert export_main([f"checkpoint={run}", f"out={out}"]) == 0
        assert not [p for p in out.iterdir() if p.name.startswith(".")]  # staging gone
        assert _snapshot(out).keys() == _snapshot(exported).keys()
        assert torch.equal(_logprobs(out), _logprobs(exported))
        with pytest.raises(UsageError, match="mount point holding files"):
            export_main([f"checkpoint={run}", f"out={out}", "replace=true"])
    finally:
        if mounted:
            subprocess.run(["umount", str(out)], check=False)


def test_ctrl_c_between_the_renames_of_replace_puts_the_old_folder_back(
    run: Path, exported: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import spiral.train.export as export

    out = tmp_path / "merged"
    shutil.copytree(exported, out)
    before = _snapshot(out)

    def interrupted(src: object, dst: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(export.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export_main([f"checkpoint={run}", f"out={out}", "replace=true"])
    assert _snapshot(out) == before and _leftovers(tmp_path) == []


def test_the_hidden_folders_of_a_killed_export_are_cleared_by_the_next(
    run: Path, exported: Path, tmp_path: Path
) -> None:
    """SIGKILL leaves the staging folder, and between replace=true's renames the old
    folder set aside with `out` missing: the next export removes the one and puts the
    other back."""
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()  # a process id that no longer runs
    (tmp_path / f".merged.export-{gone.pid}-0a0b").mkdir()
    shutil.copytree(exported, tmp_path / f".merged.old-{gone.pid}-0a0b")
    out = tmp_path / "merged"
    with pytest.raises(UsageError, match="not empty"):  # the old folder is back in place
        export_main([f"checkpoint={run}", f"out={out}"])
    assert _snapshot(out) == _snapshot(exported) and _leftovers(tmp_path) == []


def test_an_out_with_a_name_at_the_file_systems_limit_is_exported(
    run: Path, exported: Path, tmp_path: Path
) -> None:
    out = tmp_path / ("m" * os.pathconf(tmp_path, "PC_NAME_MAX"))
    assert export_main([f"checkpoint={run}", f"out={out}"]) == 0
    assert _snapshot(out).keys() == _snapshot(exported).keys()
    assert torch.equal(_logprobs(out), _logprobs(exported))
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


def test_an_out_inside_the_checkpoint_or_at_the_base_model_is_refused(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Writing where the export reads would replace the adapter being merged, or the
    base model the run was trained on (which every later load of the run would then
    merge twice)."""
    ckpt = run / "checkpoints" / "step_000002"
    config = json.loads((ckpt / "loop_state.json").read_text())["config"]
    base = Path(config["model_name"])
    before = {p: _snapshot(p) for p in (ckpt, base)}
    for out in (ckpt / "learner", ckpt, base, base / "merged"):
        err = _one_line(capsys, ["export", f"checkpoint={run}", f"out={out}", "replace=true"])
        assert "which the export reads" in err
    assert {p: _snapshot(p) for p in (ckpt, base)} == before


def test_a_damaged_checkpoint_is_refused_before_any_export(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    adapter = copy / "checkpoints" / "step_000002" / "learner" / "adapter_model.safetensors"
    data = bytearray(adapter.read_bytes())
    data[-1] ^= 0xFF  # one flipped byte in the weights: the manifest's hash disagrees
    adapter.write_bytes(bytes(data))
    err = _one_line(capsys, ["export", f"checkpoint={copy}", f"out={tmp_path / 'merged'}"])
    assert "damaged" in err and not (tmp_path / "merged").exists()


def test_an_out_name_longer_than_the_file_system_takes_is_one_line(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long = "b" * (os.pathconf(tmp_path, "PC_NAME_MAX") + 1)
    for out in (tmp_path / long, tmp_path / long / "merged"):
        err = _one_line(capsys, ["export", f"checkpoint={run}", f"out={out}"])
        assert "File name too long" in err or "is 256 bytes long" in err
