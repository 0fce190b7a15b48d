"""Population play: the pool's schedule, matchups, seats, what is trained, exact resume,
and pool members that are real frozen adapters (a tiny real model)."""

from __future__ import annotations

import random
import shutil
from collections import Counter
from pathlib import Path

import pytest

from spiral.report.sinks import read_jsonl
from spiral.rollout.play import GameSpec
from spiral.train.checkpoint import latest_checkpoint, load_loop_state
from spiral.train.config import ConfigError, parse_config
from spiral.train.loop import POLICY, train
from spiral.train.population import (
    SELF,
    Pool,
    advance,
    balanced_seats,
    choose_opponents,
    confine,
    fixed_label,
    pool_at,
    population_specs,
)
from spiral.train.setup import build_setup, make_learner_factory

from .test_e2e import _assert_rows_close, tiny_args


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from spiral.testing import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_membership_follows_the_schedule_fifo() -> None:
    # start 2, interval 3, size 2: steps 3, 6, 9 join; at 9 the member of step 3 leaves.
    pool, history = Pool(), []
    for step in range(11):
        pool, added, evicted = advance(pool, step, start_from=2, interval=3, size=2)
        history.append((step, added, evicted, pool.names))
    assert [h[1] for h in history if h[1]] == ["step_000003", "step_000006", "step_000009"]
    assert history[9][2] == ["step_000003"]
    assert history[10][3] == ["step_000006", "step_000009"]
    assert pool_at(10, 2, 3, 2) == pool
    assert Pool.from_json(pool.to_json()) == pool
    # step 0 joins when start_from is 0 (the original's rule: i % interval == 0).
    assert advance(Pool(), 0, 0, 5, 25)[1] == "step_000000"


def test_opponents_uniform_and_current_fraction() -> None:
    rng = random.Random(0)
    picks = Counter(choose_opponents(6000, ["a", "b"], rng, True, None))
    # The original: the current policy is one more uniform choice beside the members.
    assert set(picks) == {"a", "b", SELF}
    assert all(abs(n / 6000 - 1 / 3) < 0.03 for n in picks.values())
    picks = Counter(choose_opponents(6000, ["a", "b"], random.Random(1), True, 0.5))
    assert abs(picks[SELF] / 6000 - 0.5) < 0.03
    assert SELF not in choose_opponents(100, ["a"], random.Random(2), False, None)
    assert choose_opponents(3, [], random.Random(3), True, None) == [SELF] * 3  # empty pool
    with pytest.raises(ConfigError, match="fsp_weighting=variance: retired"):
        parse_config(["fsp_enabled=true", "fsp_weighting=variance"])


def test_full_fine_tuning_steps_meet_no_more_members_than_fit() -> None:
    members = [f"m{i}" for i in range(5)]
    met: Counter[str] = Counter()
    for step in range(400):
        rng = random.Random(step)
        drawn = choose_opponents(12, [*members, "random"], rng, True, None)
        out = confine(drawn, members, 2, rng)
        assert len({o for o in out if o in members}) <= 2
        # Fixed and self-play games stay where they were; member games stay member games.
        assert [o for o in out if o not in members] == [o for o in drawn if o not in members]
        assert all((o in members) == (d in members) for o, d in zip(out, drawn, strict=True))
        met.update(o for o in out if o in members)
    share = [met[m] / sum(met.values()) for m in members]
    assert all(abs(x - 0.2) < 0.02 for x in share)  # uniform: each member equally often
    assert confine(["m0", SELF, "m1"], members, 2, random.Random(0)) == ["m0", SELF, "m1"]


def test_seats_balanced_and_filled() -> None:
    seats = balanced_seats(10, random.Random(0))
    assert sorted(seats) == [0] * 5 + [1] * 5
    specs = [GameSpec("KuhnPokerSingle-v0", i, (POLICY, POLICY)) for i in range(4)]
    out = population_specs(
        specs, ["step_000005", SELF, "random", "step_000005"], [0, 1, 1, 1], POLICY, fixed_label
    )
    assert [s.seats for s in out] == [
        (POLICY, "step_000005"),
        (POLICY, POLICY),
        ("random@KuhnPokerSingle-v0", POLICY),
        ("step_000005", POLICY),
    ]


def _fsp_args(model: Path, run: Path, steps: int) -> list[str]:
    return [
        *tiny_args(model, run, steps, envs="KuhnPokerSingle-v0"),
        "batch_size=8",
        "fsp_enabled=true",
        "fsp_update_interval=1",
        "fsp_pool_size=2",
        "fsp_fixed_opponents=random",
        "eval_every=0",
        "transcripts_per_step=0",
    ]


def _run(args: list[str]) -> None:
    cfg = parse_config(args)
    train(cfg, build_setup(cfg), make_learner_factory(cfg), log=lambda _: None)


@pytest.mark.parametrize("variant", ["free", "constrained", "full"])
def test_population_run_trains_only_its_turns_and_resumes_exactly(
    tiny_model: Path, tmp_path: Path, variant: str
) -> None:
    # Constrained answers: members' answers come from kept distributions in the straight
    # run, from the model after the resume (nothing is kept across a restart). Full
    # fine-tuning: members are model folders, one held at a time.
    fmt = {
        "free": [],
        "constrained": ["answer_format=constrained"],
        "full": ["lora_rank=0", "fsp_max_loaded_members=1"],
    }[variant]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    _run([*_fsp_args(tiny_model, straight, 4), *fmt])
    _run([*_fsp_args(tiny_model, resumed, 2), *fmt])
    _run([*_fsp_args(tiny_model, resumed, 4), *fmt])  # resumes: rebuilds the pool
    rows_a, rows_b = read_jsonl(straight / "metrics.jsonl"), read_jsonl(resumed / "metrics.jsonl")
    _assert_rows_close(rows_a, rows_b)  # same games, same league, same updates
    state = load_loop_state(latest_checkpoint(straight / "checkpoints"))
    # Pool at the start of step 3 with interval 1 and size 2: the weights of steps 2 and 3.
    assert Pool.from_json(state.extra["pool"]).names == ["step_000002", "step_000003"]
    # Member folders on disk: exactly those some kept checkpoint's pool refers to (each
    # checkpoint must be resumable), here the pools of steps 2 and 4.
    assert sorted(p.name for p in (straight / "pool").iterdir()) == [
        "step_000000", "step_000001", "step_000002", "step_000003"
    ]  # fmt: skip
    league = state.extra["league"]
    assert "policy" in str(league) and "random@KuhnPokerSingle-v0" in str(league)
    assert (straight / "league.json").is_file()
    for row in rows_a:
        if "fsp/pool_size" not in row:
            continue
        assert 1 <= row["fsp/pool_size"] <= 2
        assert row["fsp/members_met"] <= (1 if variant == "full" else 2)
        # 4 games a step: the policy holds one seat against an opponent and both in a
        # self-play game; RAE counts only those seats (a seat that never moved, e.g.
        # after the other seat's invalid first move, has nothing to train on).
        games_vs_others = round(4 * (1 - row["fsp/live_self_play_ratio"]))
        seats = sum(
            row[f"rae/KuhnPokerSingle-v0/seat{k}/count"]
            for k in (0, 1)
            if f"rae/KuhnPokerSingle-v0/seat{k}/count" in row
        )
        assert 1 <= seats <= 8 - games_vs_others
    assert any(row.get("fsp/fixed_opponent_ratio", 0) > 0 for row in rows_a)


def test_unreferenced_member_folders_are_removed(tiny_model: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    _run([*_fsp_args(tiny_model, run, 5), "save_every=4"])
    # Checkpoints at 4 (pool at the start of step 3: members 2, 3) and the final one at
    # 5 (members 3, 4): the folders of members 0 and 1 are gone.
    assert sorted(p.name for p in (run / "pool").iterdir()) == [
        "step_000002", "step_000003", "step_000004"
    ]  # fmt: skip


def test_pool_average_exploitability_is_evaluated(tiny_model: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = [*_fsp_args(tiny_model, run, 2), "eval_every=1", "fsp_update_interval=100"]
    _run(args)
    rows = [
        r
        for r in read_jsonl(run / "metrics.jsonl")
        if "eval/KuhnPokerSingle-v0/exploitability_t1" in r
    ]
    first = rows[0]
    assert first["step"] == 0
    # At step 0 the pool holds one member, the weights of step 0: its average is itself.
    assert first["eval/KuhnPokerSingle-v0/pool_average/members"] == 1
    assert first["eval/KuhnPokerSingle-v0/pool_average/exploitability_t1"] == pytest.approx(
        first["eval/KuhnPokerSingle-v0/exploitability_t1"], abs=1e-9
    )
    later = rows[-1]  # the policy trained on; the pool still holds step 0 only
    assert later["eval/KuhnPokerSingle-v0/pool_average/exploitability_t1"] == pytest.approx(
        first["eval/KuhnPokerSingle-v0/pool_average/exploitability_t1"], abs=1e-9
    )


def test_snapshot_magnet_run_resumes_exactly(tiny_model: Path, tmp_path: Path) -> None:
    extra = [
        "kl_reference=snapshot", "kl_magnet_interval=3", "kl_coef=0.5", "eval_every=0",
        "answer_format=constrained", "transcripts_per_step=0",
    ]  # fmt: skip
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    for run, steps in ((straight, 5), (resumed, 2), (resumed, 5)):
        _run([*tiny_args(tiny_model, run, steps, envs="KuhnPokerSingle-v0"), *extra])
    rows_a, rows_b = read_jsonl(straight / "metrics.jsonl"), read_jsonl(resumed / "metrics.jsonl")
    _assert_rows_close(rows_a, rows_b)
    kl = {r["step"]: r["train/kl_to_magnet"] for r in rows_a}
    assert kl[0] == pytest.approx(0.0, abs=1e-7) and kl[3] == pytest.approx(0.0, abs=1e-7)
    assert kl[2] > 0 and kl[4] > 0  # between refreshes the policy moves away from it


def _flip_member(folder: Path) -> None:
    path = next(folder.rglob("*.safetensors"))
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF
    path.write_bytes(bytes(data))


def _nan_member(folder: Path) -> None:
    """A diverged member saved faithfully: hashed and sealed again after the damage."""
    import torch
    from safetensors.torch import load_file, save_file

    from spiral.checkpoints.manifest import seal, write_manifest

    path = next(folder.rglob("*.safetensors"))
    tensors = load_file(str(path))
    name = next(iter(tensors))
    tensors[name] = torch.full_like(tensors[name], float("nan"))
    save_file(tensors, str(path))
    write_manifest(folder)
    (folder / "COMPLETE").write_text(seal(folder))


def _truncate_member(folder: Path) -> None:
    path = next(folder.rglob("*.safetensors"))
    path.write_bytes(path.read_bytes()[:100])


MEMBER_DAMAGE = {
    "deleted": shutil.rmtree,
    "truncated": _truncate_member,
    "flipped bytes": _flip_member,
    "NaN weights": _nan_member,
}


@pytest.mark.parametrize("damage", sorted(MEMBER_DAMAGE))
def test_a_damaged_pool_member_is_refused_with_its_name(
    tiny_model: Path, tmp_path: Path, damage: str
) -> None:
    from spiral.checkpoints.manifest import DamagedCheckpointError

    run = tmp_path / "run"
    _run([*_fsp_args(tiny_model, run, 2)])
    state = load_loop_state(latest_checkpoint(run / "checkpoints"))
    member = Pool.from_json(state.extra["pool"]).names[-1]
    assert (run / "pool" / member / "MANIFEST.json").is_file()  # members are hashed
    MEMBER_DAMAGE[damage](run / "pool" / member)
    with pytest.raises(DamagedCheckpointError, match=f"pool member {member} .* is damaged"):
        _run([*_fsp_args(tiny_model, run, 4)])


def test_tictactoe_preset_spars_with_random_and_perfect_players(
    tiny_model: Path, tmp_path: Path
) -> None:
    # The preset as a user runs it, on a tiny model and a short run: its games are a third
    # self-play and the rest against the two fixed partners, no past self joins the pool,
    # and its greedy evaluation meets both partners in both seats.
    run = tmp_path / "ttt"
    _run(["preset=embedded-tictactoe", f"model_name={tiny_model}", f"log_path={run}",
          "batch_size=24", "max_steps=2", "eval_every=2", "eval_games=2", "save_every=2",
          "max_tokens=6", "lora_rank=4"])  # fmt: skip
    rows = read_jsonl(run / "metrics.jsonl")
    steps = [r for r in rows if "fsp/pool_size" in r]
    assert len(steps) == 2 and all(r["fsp/pool_size"] == 0 for r in steps)
    for r in steps:  # every game is self-play or against a partner; both kinds occur
        assert r["fsp/members_met"] == 0
        assert r["fsp/fixed_opponent_ratio"] + r["fsp/live_self_play_ratio"] == 1.0
    assert 0 < sum(r["fsp/live_self_play_ratio"] for r in steps) < 2
    evals = {k for r in rows for k in r}
    for opponent in ("random", "optimal"):
        for seat in (0, 1):
            assert f"eval/TicTacToe-v0/{opponent}/seat{seat}/win_rate" in evals
            assert f"eval/TicTacToe-v0/{opponent}/seat{seat}/draw_rate_low" in evals
