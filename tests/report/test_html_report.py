"""The HTML report of a tiny real run: self-contained, with curves, the league of a
population run, the Kuhn strategy table and replays that show the games' moves and outputs."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from spiral.cli import main as cli_main
from spiral.report.html import downsample, select_replays
from spiral.train.config import parse_config
from spiral.train.loop import train
from spiral.train.setup import build_setup, make_learner_factory

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def population_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from spiral.testing import make_tiny_model

    root = tmp_path_factory.mktemp("html")
    model = make_tiny_model(root / "model")
    run = root / "run"
    cfg = parse_config(
        [
            f"model_name={model}",
            "env_ids=KuhnPokerSingle-v0",
            "batch_size=8",
            "max_steps=3",
            "max_tokens=6",
            "lora_rank=4",
            "learning_rate=1e-2",
            "eval_every=2",
            "eval_games=2",
            "save_every=0",
            "template=chat",
            "answer_format=constrained",
            f"log_path={run}",
            "fsp_enabled=true",
            "fsp_update_interval=1",
            "fsp_fixed_opponents=random",
            "transcripts_per_step=2",
        ]  # fmt: skip
    )
    train(cfg, build_setup(cfg), make_learner_factory(cfg), log=lambda _: None)
    return run


def test_report_page_holds_curves_league_strategy_and_replays(
    population_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An evaluation of the run's checkpoint, as a user runs it, reaches the page.
    assert cli_main(["eval", f"checkpoint={population_run}", "games=1"]) == 0
    assert cli_main(["report", f"run={population_run}"]) == 0
    assert "HTML report:" in capsys.readouterr().out
    page = (population_run / "report" / "index.html").read_text(encoding="utf-8")
    # Self-contained: images inline, nothing fetched from elsewhere.
    assert page.count('src="data:image/png;base64,') >= 4
    assert not re.search(r'(src|href)="https?://', page)
    # The headline comes first: before -> after, from the first to the last evaluation.
    assert page.index("Before -> after (step 0 -> step 3)") < page.index("<h2>Curves</h2>")
    assert "exploitability_t1" in page and "random/seat0/win_rate" in page
    for title in ("Exact exploitability", "Loss diagnostics"):
        assert title in page
    # Each step's own peak memory: drawn where it moved, named where three short steps
    # peaked at the same kilobyte (it does on some machines).
    assert "Peak resident memory" in page or "peak resident memory (mb) (1 key," in page
    # A key that never moved is named, not drawn: no invalid move is possible here.
    assert "Constant over the run, not drawn: invalid-move rate" in page
    # The run's facts.
    info = json.loads((population_run / "run_info.json").read_text())
    assert info["git_revision"] in page and "config (" in page
    # The league of the population run: the policy and the fixed random member rated.
    assert "<h2>Leagues</h2>" in page and "random@KuhnPokerSingle-v0" in page
    # The evaluation spiral eval wrote into the run folder.
    assert "<h2>Evaluations</h2>" in page and "ckpt:step_000003 on KuhnPokerSingle-v0" in page
    # Kuhn strategy per evaluation (steps 0, 2 and the final 3) beside the Nash family.
    assert "<h2>Kuhn strategy beside Nash play</h2>" in page and "0.33-0.67" in page
    # A known game replayed: the prompt the model read, its moves, what it wrote and meant.
    replay = json.loads(sorted((population_run / "transcripts").glob("*.json"))[0].read_text())
    assert "<h2>Game replays</h2>" in page
    assert f"seed {replay['seed']}" in page
    text = html.unescape(page)
    model_turns = [t for t in replay["turns"] if t["response"] is not None]
    assert model_turns and all(t["prompt"] for t in model_turns)
    for turn in replay["turns"]:
        assert turn["result"] in text
        if turn["response"]:
            assert turn["response"].strip() in text
            assert turn["prompt"] in text and turn["observation"].strip() in turn["prompt"]


def test_long_runs_stay_small() -> None:
    rows = [{"step": i, "x": float(i)} for i in range(10_000)]
    small = downsample(rows, 400)
    assert len(small) <= 400 and small[0]["step"] == 0 and small[-1]["step"] == 9_999
    files = [Path(f"step{i:06d}_000_g.json") for i in range(1000)]
    picked = select_replays(files, 40)
    assert len(picked) == 40 and picked[0] == files[0] and picked[-1].name > "step000900"


def test_text_transcripts_parse_back_to_their_json_twins(population_run: Path) -> None:
    from spiral.report.transcripts import parse_transcript

    pairs = sorted((population_run / "transcripts").glob("*.txt"))
    assert pairs
    for text_path in pairs:
        twin = json.loads(text_path.with_suffix(".json").read_text())
        parsed = parse_transcript(text_path.read_text(), twin["step"])
        for key in ("step", "game_id", "seed", "agents", "returns", "moves"):
            assert parsed[key] == twin[key], key
        assert len(parsed["turns"]) == len(twin["turns"])
        for mine, theirs in zip(parsed["turns"], twin["turns"], strict=True):
            for key in ("seat", "agent", "result", "move", "stop"):
                assert mine[key] == theirs[key], key
            assert mine["observation"] == theirs["observation"].rstrip()
            assert (mine["response"] or "").rstrip() == (theirs["response"] or "").rstrip()


def test_damaged_eval_files_are_named_not_fatal(tmp_path: Path) -> None:
    from spiral.report.evaluations import evaluations_section, leagues_section

    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    shapes = {
        "not-json.json": "{",
        "settings-a-string.json": '{"results": [], "settings": "x"}',
        "prompt-a-string.json": '{"results": [{}], "settings": {"prompt": "x"}}',
        "exploit-a-list.json": '{"results": [], "settings": {}, "exploitability": [1]}',
        "league-bad-mu.json": '{"ratings": {"a": {"mu": "x", "sigma": 1, "ordinal": null}}}',
    }
    for name, text in shapes.items():
        (run / "eval" / name).write_text(text)
    (run / "eval" / "league_x.json").write_text(shapes["league-bad-mu.json"])
    page = evaluations_section(run) + leagues_section(run)
    for name in ("not-json.json", "prompt-a-string.json", "exploit-a-list.json", "league_x.json"):
        assert name in page  # listed as skipped
