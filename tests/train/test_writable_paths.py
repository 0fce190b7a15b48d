"""`spiral train` checks its run folder before any model work: a `log_path` it cannot
write, or a run folder whose files it cannot write again (`metrics.jsonl` replaced by a
folder, a link carrying a write out of the run), is refused in one line, and the check
creates nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from evaluation_cli import snapshot_tree

from spiral.cli import main as cli_main


def _args(model: Path, log_path: Path | str) -> list[str]:
    return [
        "train",
        f"model_name={model}",
        "env_ids=KuhnPokerSingle-v0",
        "batch_size=2",
        "max_steps=1",
        "max_tokens=4",
        "lora_rank=4",
        "eval_every=0",
        "template=chat",
        f"log_path={log_path}",
    ]


@pytest.fixture
def no_model_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building a learner fails the test: every refusal must come before it."""

    def factory(*args: object, **kwargs: object) -> None:
        raise AssertionError("model work began before the run folder was checked")

    monkeypatch.setattr("spiral.train.run.make_learner_factory", factory)


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("spiral train: cannot write ") or "is a link" in err
    return err


@pytest.mark.usefixtures("no_model_work")
@pytest.mark.parametrize("where", ["an existing file", "under a file", "name too long"])
def test_a_log_path_that_cannot_be_a_folder_is_one_line(
    tiny_llama: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    (tmp_path / "file").write_text("mine")
    log_path = {
        "an existing file": tmp_path / "file",
        "under a file": tmp_path / "file" / "run",
        "name too long": tmp_path / "runs" / ("r" * 300),
    }[where]
    err = _refused(_args(tiny_llama, log_path), capsys)
    assert f"log_path={log_path}" in err
    assert ("shorter name" if where == "name too long" else "is a file, not a folder") in err
    assert snapshot_tree(tmp_path) == {"file": b"mine"}  # nothing made, nothing changed


@pytest.mark.usefixtures("no_model_work")
def test_a_log_path_in_a_read_only_folder_is_one_line(
    tiny_llama: Path, read_only_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = sorted(p.name for p in read_only_folder.iterdir())
    err = _refused(_args(tiny_llama, read_only_folder / "run"), capsys)
    assert "takes no new files" in err
    assert sorted(p.name for p in read_only_folder.iterdir()) == before


@pytest.mark.usefixtures("no_model_work")
@pytest.mark.parametrize("name", ["metrics.jsonl", "config.json", "console.log", ".lock"])
def test_a_run_file_replaced_by_a_folder_is_one_line(
    tiny_llama: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    run = tmp_path / "run"
    (run / name).mkdir(parents=True)
    (run / name / "inside").write_text("kept")
    before = snapshot_tree(tmp_path)
    err = _refused(_args(tiny_llama, run), capsys)
    assert f"{run / name}: is a folder" in err and "move that folder away" in err
    assert snapshot_tree(tmp_path) == before


@pytest.mark.usefixtures("no_model_work")
@pytest.mark.parametrize("name", ["metrics.jsonl", "config.json", ".lock"])
def test_a_run_file_linked_elsewhere_is_refused_and_the_target_kept(
    tiny_llama: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """A resume writes config.json, the lock and metrics in place: through a link it would
    change a file outside the run."""
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere.txt"
    run.mkdir()
    elsewhere.write_text("not the run's\n")
    (run / name).symlink_to(elsewhere)
    before = snapshot_tree(tmp_path)
    err = _refused(_args(tiny_llama, run), capsys)
    assert f"{run / name} is a link (to {elsewhere})" in err
    assert snapshot_tree(tmp_path) == before


def test_a_writable_run_folder_still_trains(
    tiny_llama: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The checks leave a good run alone: folders still to be made, no probe left behind."""
    run = tmp_path / "a" / "b" / "run"
    assert cli_main(_args(tiny_llama, run)) == 0
    assert (run / "metrics.jsonl").is_file()
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".spiral-write-check")]


@pytest.mark.parametrize(
    "argv",
    [
        ["seeds", "seeds=0-1", "table_only=true"],  # the table's folder
        ["bench", "what=games", "seconds=30"],  # 30 s of timing, then the JSON
    ],
    ids=["seeds", "bench"],
)
def test_other_commands_check_out_before_the_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    (tmp_path / "file").write_text("mine")
    out = tmp_path / "file" / "out"
    capsys.readouterr()
    assert cli_main([*argv, f"out={out}"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"cannot write out={out}: {tmp_path / 'file'} is a file, not a folder" in err
    assert snapshot_tree(tmp_path) == {"file": b"mine"}


def test_a_link_to_nothing_where_a_folder_or_file_goes_is_one_line(tmp_path: Path) -> None:
    from spiral.report.writable import UnwritablePath, check_writable_file, check_writable_folder

    link = tmp_path / "runs"
    link.symlink_to(tmp_path / "gone")
    for check, path in [(check_writable_folder, link), (check_writable_folder, link / "run1"),
                        (check_writable_file, link / "out.json"), (check_writable_file, link)]:  # fmt: skip
        with pytest.raises(UnwritablePath, match="link to .*gone, which does not exist") as err:
            check(path, "out")
        assert "\n" not in str(err.value) and "remove the link" in str(err.value)
    assert not (tmp_path / "gone").exists()


def test_a_pipe_is_refused_unopened_in_one_line(tmp_path: Path) -> None:
    """Without a reader the command's last write would hang; opening it to find out
    would end a reader's stream (EOF)."""
    import os
    import threading

    from spiral.report.writable import UnwritablePath, check_writable_file

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    with pytest.raises(UnwritablePath, match="is a pipe or socket, not a file; name a regular"):
        check_writable_file(fifo, "out")
    reader.join(timeout=0.5)
    assert reader.is_alive(), "the check opened the pipe and ended the reader's stream"
    with fifo.open("wb") as writer:
        writer.write(b"done")
    reader.join(timeout=10)
    check_writable_file("/dev/null", "out")  # a device takes writes
