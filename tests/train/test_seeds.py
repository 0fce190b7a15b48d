"""`spiral seeds`: seeds parsed, statistics against hand-worked numbers, the last value
of each metric per run, and a real two-seed sweep of a tiny model that writes its table
(a rerun that trains nothing adds no wall time; a seed's missing metric stays missing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spiral.args import UsageError
from spiral.cli import main as cli_main
from spiral.train.seeds import MAX_SEEDS, final_values, parse_seeds, summarise

KUHN = "KuhnPokerSingle-v0"


def test_seeds_are_ranges_or_lists() -> None:
    assert parse_seeds("0-4") == [0, 1, 2, 3, 4]
    assert parse_seeds("0,3,7") == [0, 3, 7]
    assert parse_seeds("1-2,9") == [1, 2, 9]
    for bad in ("", "a", "3,3", "0-x"):
        with pytest.raises(UsageError, match="seeds="):
            parse_seeds(bad)


def test_a_typo_that_would_multiply_the_runs_is_refused_at_once() -> None:
    """`seeds=0-99999999999` once built a list of 1e11 ints (MemoryError), and a few
    million seeds with table_only=true hung; now every count over MAX_SEEDS is one line."""
    assert len(parse_seeds(f"0-{MAX_SEEDS - 1}")) == MAX_SEEDS
    for typo in ("0-99999999999", "0-5000000", f"0-{MAX_SEEDS}", f"0-500,501-{MAX_SEEDS + 5}"):
        with pytest.raises(UsageError, match=f"more than {MAX_SEEDS} seeds"):
            parse_seeds(typo)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789-, x", max_size=24))
def test_any_seeds_text_is_a_short_list_or_one_line(spec: str) -> None:
    try:
        seeds = parse_seeds(spec)
    except UsageError as err:
        assert "\n" not in str(err) and str(err).startswith(f"seeds={spec!r}")
        return
    assert 0 < len(seeds) <= MAX_SEEDS and len(set(seeds)) == len(seeds)
    assert all(s >= 0 for s in seeds)


def test_statistics_by_hand() -> None:
    s = summarise([0.1, 0.3, None, 0.2])
    assert s["n"] == 3 and s["mean"] == pytest.approx(0.2) and s["std"] == pytest.approx(0.1)
    assert (s["min"], s["max"]) == (0.1, 0.3)
    assert summarise([0.5]) == {"n": 1, "mean": 0.5, "std": 0.0, "min": 0.5, "max": 0.5}
    assert summarise([None]) == {"n": 0}


def test_the_last_value_of_each_metric_and_its_step() -> None:
    rows = [
        {"step": 0, "eval/g/exploitability_t1": 0.4, "train/loss": 1.0},
        {"step": 1, "train/loss": 0.5},
        {"step": 2, "eval/g/exploitability_t1": 0.2},
    ]
    got = final_values(rows, ["eval/*/exploitability_t*"])
    assert got == {"eval/g/exploitability_t1": 0.2, "eval/g/exploitability_t1@step": 2}


def test_a_two_seed_sweep_writes_one_table(
    tiny_llama: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "sweep"
    train = [
        f"model_name={tiny_llama}", f"env_ids={KUHN}", "template=chat",
        "answer_format=constrained", "max_tokens=4", "batch_size=8", "max_steps=2",
        "lora_rank=4", "eval_every=2", "eval_games=3", "save_every=2",
    ]  # fmt: skip
    assert cli_main(["seeds", "seeds=0-1", f"out={out}", *train]) == 0
    rows = [json.loads(line) for line in (out / "seeds.jsonl").read_text().splitlines()]
    assert [r["seed"] for r in rows] == [0, 1]
    key = f"eval/{KUHN}/exploitability_t1"
    assert all(0.0 <= r[key] <= 1.0 and r[f"{key}@step"] == 2 for r in rows)
    assert all(r["wall_s"] > 0 for r in rows)
    table = (out / "seeds.md").read_text()
    assert f"| {key} | " in table and "wall time (min)" in table and "seed 1" in table
    for seed in (0, 1):  # each run trained with its own seed, in its own folder
        assert json.loads((out / f"seed{seed}" / "config.json").read_text())["seed"] == seed
    # Running again finds each run finished: nothing trains, the wall times stay.
    assert cli_main(["seeds", "seeds=0-1", f"out={out}", *train]) == 0
    again = [json.loads(line) for line in (out / "seeds.jsonl").read_text().splitlines()]
    assert [b["wall_s"] for b in again] == [a["wall_s"] for a in rows]
    assert [r[key] for r in again] == [r[key] for r in rows]
    # table_only reads what is there; a seed never run is missing, not zero.
    assert cli_main(["seeds", "seeds=0-2", f"out={out}", "table_only=true"]) == 0
    line = next(x for x in (out / "seeds.md").read_text().splitlines() if x.startswith(f"| {key} "))
    assert line.endswith("| - |") and "| 2 |" in line  # seed 2: missing; statistics over 2
    # so is the wall time of a seed `spiral seeds` did not train
    wall = next(x for x in (out / "seeds.md").read_text().splitlines() if x.startswith("| wall"))
    assert wall.endswith("| - |") and "| 2 |" in wall
    assert json.loads((out / "seeds.jsonl").read_text().splitlines()[2])["wall_s"] is None
    capsys.readouterr()


def test_seed_and_log_path_belong_to_the_sweep(tmp_path: Path) -> None:
    assert cli_main(["seeds", "seeds=0", f"out={tmp_path}", "seed=3"]) == 2


def test_a_table_from_a_folder_without_runs_is_refused(tmp_path: Path) -> None:
    from spiral.errors import UsageError
    from spiral.train.seeds import main as seeds_main

    with pytest.raises(UsageError, match="holds no run"):
        seeds_main(["seeds=0-1", f"out={tmp_path / 'nope'}", "table_only=true"])
    assert not (tmp_path / "nope").exists()


def test_a_rewritten_table_keeps_the_command_that_trained_the_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from spiral.train.seeds import main as seeds_main

    (tmp_path / "seed0").mkdir()
    (tmp_path / "seed0" / "metrics.jsonl").write_text('{"step": 1, "train/loss": 0.5}\n')
    trained = f"spiral seeds seeds=0-1 out={tmp_path} max_steps=3 learning_rate=1e-3"
    (tmp_path / "seeds.md").write_text(f"# 2 seeds\n\n    {trained}\n")
    assert seeds_main(["seeds=0-1", f"out={tmp_path}", "table_only=true"]) == 0
    assert (tmp_path / "seeds.md").read_text().splitlines()[2].strip() == trained
    assert "no run of seed(s) [1]" in capsys.readouterr().err
