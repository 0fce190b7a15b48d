"""`spiral eval` end to end on tiny-model checkpoints written like the trainer writes them,
and `spiral eval run=DIR` comparing two checkpoints."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest

from spiral.agents.model_agent import make_checkpoint_agent
from spiral.cli import main as cli_main
from spiral.evaluation.cli import main
from spiral.evaluation.compare import select_checkpoints
from spiral.evaluation.eval_args import EvalError, parse_eval_args
from spiral.evaluation.inherit import eval_args
from spiral.evaluation.run import evaluate_candidate

from . import chat_server, free_port, write_checkpoint

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("run")
    write_checkpoint(run, step=2, seed=1)
    write_checkpoint(run, step=4, seed=2)
    return run


def _check_rates(row: dict) -> None:
    assert row["wins"] + row["draws"] + row["losses"] == row["games"]
    assert row["invalid"] <= row["losses"]
    for label in ("win", "draw", "loss", "invalid"):
        rate = row[f"{label}_rate"]
        assert 0.0 <= rate["low"] <= rate["value"] <= rate["high"] <= 1.0


def test_eval_checkpoint_end_to_end(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = run_dir / "checkpoints" / "step_000004"
    args = [
        f"checkpoint={ckpt}",
        "env_ids=TicTacToe-v0,KuhnPokerSingle-v0",
        "opponents=random,optimal",
        "games=2",
        "seed=3",
        "max_tokens=4",
        "answer_format=constrained",  # every move legal: real wins and losses
        "exploitability=true",
        "math=sample:gsm8k",
        "math_limit=2",
        "math_max_tokens=4",
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "ckpt:step_000004" in printed and "win" in printed and "exploitability" in printed
    assert "mean return" in printed
    name = "step_000004_TicTacToe-v0+KuhnPokerSingle-v0_vs_random+optimal_seed3.json"
    report = json.loads((run_dir / "eval" / name).read_text())  # in the run, named by content
    assert report["candidate"]["step"] == 4
    assert report["settings"]["sampling"]["max_tokens"] == 4  # the override
    assert report["settings"]["prompt"]["answer_format"] == "constrained"
    assert report["settings"]["prompt"]["template"] == "chat"  # from the run config
    rows = report["results"]
    keys = {(r["game_id"], r["opponent"], r["seat"]) for r in rows}
    assert keys == {
        (g, o, s)
        for g in ("TicTacToe-v0", "KuhnPokerSingle-v0")
        for o in ("random", "optimal")
        for s in (0, 1)
    }
    for row in rows:
        assert row["games"] == 2 and len(row["seeds"]) == 2
        assert row["invalid"] == 0 and row["mean_game_length"] >= 2
        if row["game_id"] == "TicTacToe-v0":  # a win is +1, a loss -1
            assert row["mean_return"] == pytest.approx((row["wins"] - row["losses"]) / 2)
        else:  # Kuhn: 1 or 2 chips a hand
            assert abs(row["mean_return"]) <= 2.0
        assert row["return_low"] <= row["mean_return"] <= row["return_high"]
        _check_rates(row)
    # Both seats of a pairing are dealt the same games.
    seeds = {(r["game_id"], r["opponent"], r["seat"]): r["seeds"] for r in rows}
    assert seeds[("KuhnPokerSingle-v0", "random", 0)] == seeds[("KuhnPokerSingle-v0", "random", 1)]
    assert set(report["exploitability"]) == {"TicTacToe-v0", "KuhnPokerSingle-v0"}
    kuhn = report["exploitability"]["KuhnPokerSingle-v0"]
    assert 0.0 <= kuhn["exploitability"] <= 2.0
    assert kuhn["nash_conv"] == pytest.approx(2 * kuhn["exploitability"])
    assert len(kuhn["distributions"]) == 12
    for info, dist in kuhn["distributions"].items():
        expected = {"[fold]", "[call]"} if info.endswith("b") else {"[check]", "[bet]"}
        assert set(dist) == expected
        assert math.fsum(dist.values()) == pytest.approx(1.0)
    assert 0.0 <= report["math"]["math/sample_gsm8k/accuracy"] <= 1.0
    assert report["metrics"]["eval/KuhnPokerSingle-v0/exploitability"] == kuhn["exploitability"]
    ttt = report["exploitability"]["TicTacToe-v0"]
    # a random-init model is far from minimax: exploitable, within the game's [-1, 1]
    assert 0.0 < ttt["exploitability"] <= 1.0
    assert ttt["nash_conv"] == pytest.approx(2 * ttt["exploitability"])
    assert ttt["nash_conv"] == pytest.approx(ttt["br_value_seat0"] + ttt["br_value_seat1"])
    assert ttt["value_selfplay_seat1"] == pytest.approx(-ttt["value_selfplay_seat0"])
    assert ttt["br_value_seat0"] >= ttt["value_selfplay_seat0"]  # a best response gains
    assert ttt["br_value_seat1"] >= ttt["value_selfplay_seat1"]
    assert ttt["temperature"] == 1.0
    assert report["metrics"]["eval/TicTacToe-v0/exploitability"] == ttt["exploitability"]


def test_same_seed_same_results(run_dir: Path) -> None:
    ckpt = run_dir / "checkpoints" / "step_000002"
    candidate = make_checkpoint_agent(str(ckpt), max_tokens=4, device="cpu")
    args = eval_args([f"checkpoint={ckpt}", "games=2", "seed=5"]).args
    first, _ = evaluate_candidate(candidate, args)
    again, _ = evaluate_candidate(candidate, args)
    assert first["results"] == again["results"]
    other, _ = evaluate_candidate(candidate, eval_args([f"checkpoint={ckpt}", "seed=6"]).args)
    assert [r["seeds"] for r in other["results"]] != [r["seeds"] for r in first["results"]]


def test_an_unreachable_api_opponent_stops_eval_in_one_line(
    run_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No reply is no move: the run stops naming the opponent and the URL instead of
    reporting the games it could not play as won."""
    from spiral.agents import api_agent

    monkeypatch.setattr(api_agent.time, "sleep", lambda seconds: None)
    out = tmp_path / "api.json"
    url = f"http://127.0.0.1:{free_port()}/v1"
    args = [
        f"checkpoint={run_dir}",  # a run folder: its newest checkpoint
        "opponents=api:nobody",
        f"api_base_url={url}",
        "api_max_retries=1",
        "games=2",
        "max_tokens=4",
        f"out={out}",
    ]
    capsys.readouterr()
    assert cli_main(["eval", *args]) == 2
    err = capsys.readouterr().err
    assert f"api:nobody at {url} did not answer after 2 attempt(s)" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_compare_two_checkpoints(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with chat_server("[check]") as api:  # an API model that always checks (or calls wrong)
        _compare_two_checkpoints(run_dir, api)
    assert "comparison table" in capsys.readouterr().out


def _compare_two_checkpoints(run_dir: Path, api: Any) -> None:
    args = [
        f"run={run_dir}",
        "env_ids=KuhnPokerSingle-v0",  # (TicTacToe's exploitability: the test above)
        "games=1",
        "seed=2",
        "max_tokens=4",
        "exploitability=true",
        "opponents=random,api:nobody",
        f"api_base_url={api.url}",
    ]
    assert main(args) == 0
    out_dir = run_dir / "eval"
    tag = "KuhnPokerSingle-v0_vs_random+api-nobody_seed2"
    with open(out_dir / f"compare_{tag}.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["step"] for r in rows} == {"2", "4"}
    win = [r for r in rows if r["metric"] == "win_rate"]
    assert {(r["step"], r["opponent"], r["seat"]) for r in win} == {
        (s, o, t) for s in ("2", "4") for o in ("random", "api:nobody") for t in ("0", "1")
    }
    assert len([r for r in rows if r["metric"] == "exploitability"]) == 2
    markdown = (out_dir / f"compare_{tag}.md").read_text()
    assert markdown.startswith("| step | game | opponent | seat | n | win_rate")
    # header, 2 steps x 2 opponents x 2 seats, one exploitability row per step
    assert markdown.count("\n") == 2 + 8 + 2
    for name in ("win_rate.png", "exploitability.png"):
        assert (out_dir / f"compare_{tag}_{name}").read_bytes()[:8] == PNG_MAGIC
    # The API opponent is shared by both checkpoints; each report counts only its own calls.
    calls = [
        json.loads((out_dir / f"{step}_{tag}.json").read_text())["api"]["api:nobody"]["calls"]
        for step in ("step_000002", "step_000004")
    ]
    assert min(calls) > 0 and sum(calls) == api.requests


def test_select_every_kth_keeps_the_newest(tmp_path: Path) -> None:
    for step in (0, 5, 10, 15, 20):
        folder = tmp_path / "checkpoints" / f"step_{step:06d}"
        folder.mkdir(parents=True)
        (folder / "loop_state.json").write_text("{}")
        (folder / "COMPLETE").write_text("x")
    (tmp_path / "checkpoints" / "step_000025").mkdir()  # incomplete: never chosen
    assert [s for s, _ in select_checkpoints(tmp_path, 1)] == [0, 5, 10, 15, 20]
    assert [s for s, _ in select_checkpoints(tmp_path, 2)] == [0, 10, 20]
    assert [s for s, _ in select_checkpoints(tmp_path, 3)] == [0, 15, 20]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["checkpoint=base", "env_ids=Chess-v9"], "is not a registered game"),
        (["checkpoint=base", "opponents=grandmaster"], "unknown opponent"),
        (["checkpoint=base", "env_ids=LeducPoker-v0,LeducPoker-v0"], "given more than once"),
        (["checkpoint=base", "opponents=optimal,random,optimal"], "optimal given more than"),
        (["checkpoint=base", "env_ids=PigDice-v1", "opponents=optimal"], "no optimal player"),
        (["checkpoint=/no/such/folder"], "does not exist"),
        (["checkpoint=base", "opponents=checkpoint:/no/such"], "does not exist"),
        (["checkpoint=base", "colour=red"], "unknown key"),
        (["checkpoint=base", "games=zero"], "games="),
        (["env_ids=TicTacToe-v0"], "exactly one of checkpoint"),
        (["checkpoint=base", "invalid_policy=lenient"], "expected one of spiral, strict, loss"),
        (
            ["checkpoint=base", "env_ids=PigDice-v1", "exploitability=true"],
            "games that do: KuhnPokerSingle-v0, LeducPoker-v0, TicTacToe-v0",
        ),
    ],
)
def test_bad_arguments_fail_before_loading(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["eval", *args]) == 2
    assert message in capsys.readouterr().err


def test_help_lists_every_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    for key in ("checkpoint", "run", "env_ids", "opponents", "games", "seed", "exploitability"):
        assert f"  {key} " in text
    with pytest.raises(EvalError):
        parse_eval_args(["checkpoint=a", "run=b"])


@pytest.mark.parametrize("damage", ["manifest deleted", "manifest rewritten"])
def test_eval_refuses_a_checkpoint_whose_manifest_was_lost_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    """A flipped byte hidden by deleting or rewriting the manifest: the COMPLETE marker
    names the manifest it was written with, so eval refuses in one line."""
    from spiral.checkpoints.manifest import MANIFEST, write_manifest

    folder = write_checkpoint(tmp_path, step=2)
    adapter = folder / "learner" / "adapter_model.safetensors"
    data = bytearray(adapter.read_bytes())
    data[-100] ^= 0xFF
    adapter.write_bytes(bytes(data))
    if damage == "manifest deleted":
        (folder / MANIFEST).unlink()
    else:
        write_manifest(folder)
    capsys.readouterr()  # the checkpoint's own writing
    code = cli_main(["eval", f"checkpoint={folder}", "opponents=random", "games=2"])
    err = capsys.readouterr().err
    assert code == 2 and "is damaged" in err and MANIFEST in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_resealed_checkpoint_whose_adapter_is_cut_short_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The adapter cut short and the checkpoint hashed and sealed again: the manifest no
    longer sees the damage, the loader does, and names the file."""
    from spiral.checkpoints.manifest import seal, write_manifest

    folder = write_checkpoint(tmp_path, step=2)
    adapter = folder / "learner" / "adapter_model.safetensors"
    adapter.write_bytes(adapter.read_bytes()[: adapter.stat().st_size // 2])
    write_manifest(folder)
    (folder / "COMPLETE").write_text(seal(folder))
    capsys.readouterr()
    code = cli_main(["eval", f"checkpoint={folder}", "opponents=random", "games=2"])
    err = capsys.readouterr().err
    assert code == 2 and f"{adapter} is unreadable" in err and "earlier checkpoint" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_checkpoint_from_before_manifests_is_used_and_said_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from spiral.checkpoints.manifest import MANIFEST

    folder = write_checkpoint(tmp_path, step=2)
    (folder / MANIFEST).unlink()
    (folder / "COMPLETE").write_text("2026-11-20T10:00:00")  # the marker before seals
    capsys.readouterr()
    code = cli_main(["eval", f"checkpoint={folder}", "opponents=random", "games=2"])
    assert code == 0
    assert "predates manifests" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["eval", "serve"])
def test_a_run_before_its_first_save_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A run that has written its config.json and first metrics but no checkpoint: not
    read as a model folder (its config.json is the run's)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"env_ids": ["TicTacToe-v0"], "lora_rank": 4}))
    (run / "metrics.jsonl").write_text('{"step": 0, "time": 1.0}\n')
    argv = [command, f"checkpoint={run}"] + (["opponents=random"] if command == "eval" else [])
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert "no complete checkpoint" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
