"""`spiral report` (and a resume) on damaged run folders: the result, or one line.

A run folder outlives the process that wrote it: it is copied, archived, edited by hand
and half-restored. Whatever happens to its files, the commands that read it answer with
a correct result (exit 0; what they leave out, said on stderr) or one line saying what
to do (exit 2), never a traceback, and never change a file they were not asked to
write. The property test damages a real tiny run in generated ways; the tests before it
pin the cases found by hand.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from evaluation_cli import snapshot_tree
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from spiral.cli import main as cli_main
from spiral.report.sinks import DamagedMetricsError, JsonlSink, read_jsonl

WIN = "eval/KuhnPokerSingle-v0/random/seat0/win_rate"


def _spiral(*argv: str) -> tuple[int, str, str]:
    """`spiral ARGV` in this process: (exit status, stdout, stderr). An exception that
    escapes (a traceback for the user) fails the test where it is raised."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _small_run(folder: Path, config: Any) -> Path:
    """A run folder of six metrics rows (evaluated at 3 and 6) and `config` as config.json."""
    sink = JsonlSink(folder / "metrics.jsonl")
    for step in range(1, 7):
        sink.log({"train/loss": 1.0 / step, **({WIN: 0.1 * step} if step % 3 == 0 else {})}, step)
    sink.close()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


CONFIG = {"model_name": "tiny", "env_ids": ["KuhnPokerSingle-v0"], "max_steps": 6}


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({**CONFIG, "env_ids": 7}, "env_ids is 7, not a list of game ids"),
        ({**CONFIG, "env_ids": "KuhnPokerSingle-v0"}, "env_ids is 'KuhnPokerSingle-v0', not"),
        ({**CONFIG, "env_ids": [["KuhnPokerSingle-v0"]]}, "env_ids is [['KuhnPokerSingle-v0']]"),
        ({**CONFIG, "model_name": ["tiny"]}, "model_name is ['tiny'], not a string"),
        ({**CONFIG, "max_steps": "6"}, "max_steps is '6', not an integer"),
        ([1, 2], "is a JSON list, not an object"),
        (7, "is a JSON int, not an object"),
    ],
)
def test_a_config_field_of_another_type_is_named_and_the_report_still_renders(
    tmp_path: Path, config: Any, named: str
) -> None:
    run = _small_run(tmp_path / "run", config)
    code, out, err = _spiral("report", f"run={run}")
    assert code == 0 and "Traceback" not in err
    notes = [line for line in err.splitlines() if "config.json" in line]
    assert len(notes) == 1 and named in notes[0] and "loop_state.json" in notes[0], err
    page = (run / "report" / "index.html").read_text(encoding="utf-8")
    assert "KuhnPokerSingle-v0" in page and "step 6" in page  # the metrics are all there
    assert "- rows: 6, steps 1 to 6" in (run / "report" / "summary.md").read_text()


def test_a_good_config_says_nothing(tmp_path: Path) -> None:
    run = _small_run(tmp_path / "run", CONFIG)
    code, _, err = _spiral("report", f"run={run}")
    assert code == 0 and "config.json" not in err
    assert "tiny on KuhnPokerSingle-v0: " in (run / "report" / "index.html").read_text()


@pytest.mark.parametrize("where", ["metrics.jsonl", "report", "report/summary.md"])
def test_a_folder_or_file_in_the_way_is_one_line(tmp_path: Path, where: str) -> None:
    run = _small_run(tmp_path / "run", CONFIG)
    if where == "metrics.jsonl":
        (run / where).unlink()
        (run / where).mkdir()
    elif where == "report":
        (run / where).write_text("a file")
    else:
        (run / where).mkdir(parents=True)
    code, _, err = _spiral("report", f"run={run}")
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert str(run / where) in err


@pytest.mark.parametrize(
    ("row", "named"),
    [
        ({"step": 2, "train/loss": "x"}, "train/loss is 'x', not a number"),
        ({"step": 2, "train/loss": [0.5]}, "train/loss is [0.5], not a number"),
        ({"step": 2, "train/loss": 10**400}, "train/loss is 1000000"),
        ({"train/loss": 0.5}, "no step"),
    ],
)
def test_a_metrics_row_of_another_shape_is_skipped_and_named(
    tmp_path: Path, row: dict[str, Any], named: str
) -> None:
    """Every reader takes steps as integers and values as numbers: a row that breaks that
    is damaged by the one rule (`sinks.py`): skipped by the report, refused by resume."""
    run = _small_run(tmp_path / "run", CONFIG)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[1] = json.dumps(row)
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    code, _, err = _spiral("report", f"run={run}")
    assert code == 0 and "Traceback" not in err
    assert f"lines 2 ({named}" in err
    assert "- rows: 5, steps 1 to 6" in (run / "report" / "summary.md").read_text()
    with pytest.raises(DamagedMetricsError, match="metrics.jsonl:2: damaged metrics row"):
        read_jsonl(run / "metrics.jsonl")


def test_a_transcript_of_another_shape_is_skipped_and_named(tmp_path: Path) -> None:
    run = _small_run(tmp_path / "run", CONFIG)
    (run / "transcripts").mkdir()
    game = {"step": 3, "game_id": "KuhnPokerSingle-v0", "returns": ["a", "b"], "turns": [7]}
    (run / "transcripts" / "step000003_000_KuhnPokerSingle-v0.json").write_text(json.dumps(game))
    (run / "transcripts" / "step000004_000_KuhnPokerSingle-v0.json").write_bytes(b"\xff\xfe")
    code, _, err = _spiral("report", f"run={run}")
    assert code == 0 and "Traceback" not in err
    page = (run / "report" / "index.html").read_text(encoding="utf-8")
    assert "Skipped (unreadable): step000003_000_KuhnPokerSingle-v0.json, step000004" in page


# ---- the property: a real tiny run, damaged in generated ways ---------------------------

TRAIN = [
    "env_ids=KuhnPokerSingle-v0",
    "batch_size=2",
    "max_steps=2",
    "max_tokens=6",
    "lora_rank=4",
    "eval_every=2",
    "eval_games=2",
    "save_every=2",
    "template=chat",
]
WRITTEN_BY_RESUME = {".lock", "console.log"}  # what resuming a finished run writes


@pytest.fixture(scope="module")
def finished(tiny_llama: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A finished 2-step run (a checkpoint, evaluations, transcripts, an eval report), and
    the summary `spiral report` writes for it undamaged."""
    root = tmp_path_factory.mktemp("finished")
    run, model = root / "run", f"model_name={tiny_llama}"
    assert _spiral("train", model, *TRAIN, f"log_path={run}")[0] == 0
    checkpoint = run / "checkpoints" / "step_000002"
    assert _spiral("eval", f"checkpoint={checkpoint}", "opponents=random", "games=1")[0] == 0
    pristine = root / "pristine"
    shutil.copytree(run, pristine / "run", symlinks=True)
    assert _spiral("report", f"run={pristine / 'run'}")[0] == 0
    summary = (pristine / "run" / "report" / "summary.md").read_text(encoding="utf-8")
    return {"run": run, "model": model, "summary": summary, "rows": len(_rows(run))}


def _rows(run: Path) -> list[dict[str, Any]]:
    with contextlib.redirect_stderr(io.StringIO()):
        return read_jsonl(run / "metrics.jsonl", damaged="skip")


def _files(run: Path) -> list[str]:
    return sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file())


VALUES = st.sampled_from([7, -1.5, True, None, "x", "", [1, "a"], [], {"a": 1}, 10**400])


@st.composite
def damages(draw: st.DrawFn, files: list[str]) -> tuple[str, str, Any]:
    """(file, kind, detail): what to do to which file of the run. One in five damages a
    checkpoint's file, which `spiral report` does not read (nor a cheap resume reach:
    tests/train/test_damaged_checkpoints.py resumes from them)."""
    inside = [f for f in files if f.startswith("checkpoints/step_")]
    outside = [f for f in files if f not in inside]
    name = draw(
        st.sampled_from(inside) if draw(st.integers(0, 4)) == 0 else st.sampled_from(outside)
    )
    kinds = ["truncate", "flip", "delete", "folder", "link"]
    if name.endswith((".json", ".jsonl")):
        kinds += ["retype", "retop"]
    kind = draw(st.sampled_from(kinds))
    detail: Any = None
    if kind in ("truncate", "flip"):
        detail = (draw(st.floats(0, 1, exclude_max=True)), draw(st.integers(1, 255)))
    elif kind == "retype":
        detail = (draw(st.integers(0, 10_000)), draw(st.integers(0, 10_000)), draw(VALUES))
    elif kind == "retop":
        detail = draw(st.sampled_from([[1, 2], 7, "text", None, []]))
    elif kind == "link":
        detail = draw(st.booleans())  # the link's file: a copy of the original, or other text
    return name, kind, detail


def _retype(path: Path, line_pick: int, key_pick: int | str, value: Any) -> None:
    """One field of the file's object (of one line's, in a .jsonl) given `value`: the
    field named by `key_pick`, or the `key_pick`-th in sorted order."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines() if path.suffix == ".jsonl" else [text]
    number = line_pick % len(lines)
    data = json.loads(lines[number])
    if isinstance(data, dict) and data:
        data[key_pick if isinstance(key_pick, str) else sorted(data)[key_pick % len(data)]] = value
    lines[number] = json.dumps(data)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _damage(path: Path, kind: str, detail: Any, elsewhere: Path) -> None:
    data = path.read_bytes()
    actions: dict[str, Callable[[], object]] = {
        "truncate": lambda: path.write_bytes(data[: int(detail[0] * len(data))]),
        "flip": lambda: path.write_bytes(_flipped(data, *detail)),
        "delete": path.unlink,
        "folder": lambda: (path.unlink(), path.mkdir(), (path / "inside").write_text("x")),
        "link": lambda: (
            elsewhere.write_bytes(data if detail else b"somebody else's file\n"),
            path.unlink(),
            path.symlink_to(elsewhere),
        ),
        "retype": lambda: _retype(path, *detail),
        "retop": lambda: path.write_text(json.dumps(detail), encoding="utf-8"),
    }
    actions[kind]()


def _flipped(data: bytes, where: float, mask: int) -> bytes:
    if not data:
        return b"\xff"
    changed = bytearray(data)
    changed[int(where * len(data))] ^= mask
    return bytes(changed)


def _one_line_or_result(code: int, err: str, command: str) -> None:
    assert "Traceback" not in err, err
    if code != 0:
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith(f"spiral {command}: "), err


def _report_is_correct(run: Path, finished: dict[str, Any], name: str) -> None:
    summary = (run / "report" / "summary.md").read_text(encoding="utf-8")
    assert (run / "report" / "index.html").is_file()
    if name != "metrics.jsonl":  # the metrics are whole: the very same summary
        assert summary == finished["summary"].replace(
            str(finished["run"].parent / "pristine" / "run"), str(run)
        )
    else:  # damaged rows are left out, never made up
        assert summary.startswith("# Run report: run")
        assert len(_rows(run)) <= finished["rows"]


def _resume_is_harmless(run: Path, finished: dict[str, Any], root: Path) -> None:
    """Resuming the finished run: nothing to do, or one line; nothing else written."""
    before = snapshot_tree(root, {"run/report", *(f"run/{n}" for n in WRITTEN_BY_RESUME)})
    code, _, err = _spiral("train", finished["model"], *TRAIN, f"log_path={run}")
    _one_line_or_result(code, err, "train")
    assert snapshot_tree(root, {"run/report", *(f"run/{n}" for n in WRITTEN_BY_RESUME)}) == before


@pytest.mark.filterwarnings("ignore")
def test_any_damage_to_a_run_gives_the_result_or_one_line(finished: dict[str, Any]) -> None:
    files = [f for f in _files(finished["run"]) if f != ".lock"]

    @settings(
        max_examples=8,
        deadline=None,
        derandomize=True,  # the same cases every run: a failure here is never flaky
        phases=(Phase.explicit, Phase.generate),  # no shrinking: each case costs seconds
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(damage=damages(files))
    @example(damage=("config.json", "retype", (0, "env_ids", 7)))  # the cases found by hand
    @example(damage=("config.json", "link", True))
    @example(damage=("metrics.jsonl", "folder", None))
    @example(damage=("checkpoints/index.jsonl", "folder", None))
    def check(damage: tuple[str, str, Any]) -> None:
        name, kind, detail = damage
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            run = root / "run"
            shutil.copytree(finished["run"], run, symlinks=True)
            _damage(run / name, kind, detail, root / "elsewhere")
            before = snapshot_tree(root, {"run/report"})
            code, _, err = _spiral("report", f"run={run}")
            _one_line_or_result(code, err, "report")
            if code == 0:
                _report_is_correct(run, finished, name)
            assert snapshot_tree(root, {"run/report"}) == before  # only report/ was written
            if not name.startswith("checkpoints/step_"):  # else resume retrains: not cheap
                _resume_is_harmless(run, finished, root)

    check()
