"""`spiral eval checkpoint=RUN` evaluates what the run trained: its game, its prompt and its
answer settings, and on single-hand Kuhn the same exact exploitability the run logged at
its last evaluation. Its reports land in the run's eval/ under names that say what they
hold, and a second evaluation does not overwrite the first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spiral.cli import main as cli_main
from spiral.evaluation.outputs import fresh, settings_tag
from spiral.report.sinks import read_jsonl

from . import tiny_model_dir

KUHN = "KuhnPokerSingle-v0"


@pytest.fixture(scope="module")
def kuhn_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-step single-hand Kuhn run with the make-train prompt (constrained answers,
    the focused prompt), evaluated and saved at its end."""
    run = tmp_path_factory.mktemp("kuhn") / "run"
    argv = [
        "train",
        f"model_name={tiny_model_dir()}",
        f"env_ids={KUHN}",
        "template=chat",
        "answer_format=constrained",
        "prompt_style=focused",
        "max_tokens=4",
        "batch_size=8",
        "max_steps=2",
        "lora_rank=4",
        "learning_rate=5e-2",
        "eval_every=2",
        "eval_games=3",
        "save_every=2",
        f"log_path={run}",
    ]
    assert cli_main(argv) == 0
    return run


def test_eval_of_a_run_measures_what_training_measured(
    kuhn_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert cli_main(["eval", f"checkpoint={kuhn_run}"]) == 0
    printed = capsys.readouterr().out
    inherited = next(line for line in printed.splitlines() if "from the run's config" in line)
    for key in (f"env_ids={KUHN}", "games=3", "exploitability=true", "prompt_style=focused"):
        assert key in inherited
    assert f"ckpt:step_000002: {KUHN}, 6 games" in printed  # progress before the games
    report_path = kuhn_run / "eval" / f"step_000002_{KUHN}_vs_random_seed0.json"
    report = json.loads(report_path.read_text())
    assert report["settings"]["env_ids"] == [KUHN] and report["settings"]["games_per_seat"] == 3
    assert report["settings"]["prompt"]["style"] == "focused"
    assert report["settings"]["prompt"]["answer_format"] == "constrained"
    assert report["settings"]["sampling"]["max_tokens"] == 4
    trained = [r for r in read_jsonl(kuhn_run / "metrics.jsonl") if "eval/" + KUHN in str(r)]
    final = trained[-1]
    assert final["step"] == 2
    measured = report["exploitability"][KUHN]["exploitability"]
    assert measured == final[f"eval/{KUHN}/exploitability_t1"]
    # What it ran is in the run folder too: the console, start to end.
    console = (kuhn_run / "console.log").read_text()
    assert "run folder:" in console and "evaluation at step 0 -> step 2" in console


def test_a_second_eval_is_kept_beside_the_first(
    kuhn_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tag = settings_tag([KUHN], ["random"], 7)
    first = kuhn_run / "eval" / f"step_000002_{tag}.json"
    argv = ["eval", f"checkpoint={kuhn_run}", "seed=7", "games=1", "exploitability=false"]
    assert cli_main(argv) == 0
    assert cli_main([*argv[:-1], "exploitability=true"]) == 0
    second = first.with_name(f"{first.stem}-2.json")
    assert json.loads(first.read_text())["exploitability"] is None
    final = read_jsonl(kuhn_run / "metrics.jsonl")[-1]  # the same weights: the same number
    found = json.loads(second.read_text())["exploitability"][KUHN]["exploitability"]
    assert found == final[f"eval/{KUHN}/exploitability_t1"]
    assert fresh(first) == first.with_name(f"{first.stem}-3.json")
    assert f"report: {second}" in capsys.readouterr().out


def test_keys_given_override_the_run(kuhn_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", f"checkpoint={kuhn_run}", "env_ids=TicTacToe-v0", "games=1"]
    argv += ["prompt_style=original", "out=" + str(kuhn_run / "ttt.json")]
    assert cli_main(argv) == 0
    report = json.loads((kuhn_run / "ttt.json").read_text())
    assert report["settings"]["env_ids"] == ["TicTacToe-v0"]
    assert report["settings"]["prompt"]["style"] == "original"
    assert report["exploitability"] is None  # training measured it on Kuhn, not here
    inherited = next(
        line for line in capsys.readouterr().out.splitlines() if "from the run's config" in line
    )
    assert "env_ids=" not in inherited and "prompt_style" not in inherited


def test_a_checkpoints_learner_folder_and_an_export_bring_the_run(
    kuhn_run: Path, tmp_path: Path
) -> None:
    """What a model card tells a reader to run works: the learner folder and an exported
    model are evaluated with the run's games and prompt."""
    from spiral.agents.model_agent import resolve_source

    learner = kuhn_run / "checkpoints" / "step_000002" / "learner"
    found = resolve_source(str(learner))
    assert found.name == "ckpt:step_000002" and found.config["prompt_style"] == "focused"
    out = tmp_path / "merged"
    assert cli_main(["export", f"checkpoint={kuhn_run}", f"out={out}"]) == 0
    exported = resolve_source(str(out))
    assert exported.name == "model:merged" and exported.step == 2
    assert exported.config["env_ids"] == [KUHN]


def test_what_the_run_asked_for_gives_way_where_it_cannot_run(
    kuhn_run: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exploitability the user did not type is switched off, with a note, where OpenSpiel is
    missing; a league takes the run's games, not its opponents or exploitability."""
    import importlib.util

    from spiral.evaluation.inherit import eval_args, inherited_lines

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pyspiel" else real(name, *a)
    )
    found = eval_args([f"checkpoint={kuhn_run}"])
    assert found.args.exploitability is False
    assert any("exploitability off: it needs OpenSpiel" in line for line in inherited_lines(found))
    league = eval_args([f"run={kuhn_run}", "league=true"])
    assert league.args.env_ids == (KUHN,) and league.args.games == 3
    assert league.args.opponents == ("random",) and not league.args.exploitability
    assert not any(t.startswith(("opponents=", "exploitability=")) for t in league.taken)


def test_a_turn_limit_given_to_eval_ends_every_game_there(tmp_path: Path) -> None:
    out = tmp_path / "limit.json"
    argv = ["eval", f"checkpoint={tiny_model_dir()}", "env_ids=TicTacToe-v0", "games=2"]
    argv += ["answer_format=constrained", "max_tokens=4", "max_turns=2", f"out={out}"]
    assert cli_main(argv) == 0
    rows = json.loads(out.read_text())["results"]
    assert [(r["mean_game_length"], r["draws"]) for r in rows] == [(2.0, 2), (2.0, 2)]
