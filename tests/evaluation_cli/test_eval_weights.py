"""`spiral eval checkpoint=RUN weights=...`: the live weights, the moving average of the
weights, or the mixture of the run's checkpoints (one drawn per game), whose exact
exploitability is the members' reach-weighted average."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from spiral.agents.mixture import MixturePolicy, mixture_checkpoints
from spiral.agents.model_agent import CheckpointNotFound, make_checkpoint_agent
from spiral.analysis.average_policy import average_policy_report
from spiral.analysis.exploitability import kuhn_tabular_policy
from spiral.cli import main as cli_main
from spiral.evaluation.mixture import mixture_exploitability
from spiral.evaluation.model_policy import model_kuhn_exploitability
from spiral.games import make

from . import tiny_model_dir

KUHN = "KuhnPokerSingle-v0"


@pytest.fixture(scope="module")
def kuhn_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four full-width steps of single-hand Kuhn, a checkpoint after each, with averaged
    weights."""
    run = tmp_path_factory.mktemp("kuhn") / "run"
    argv = [
        "train",
        f"model_name={tiny_model_dir()}",
        f"env_ids={KUHN}",
        "template=chat",
        "answer_format=constrained",
        "rollout=full_width",
        "max_tokens=4",
        "max_steps=4",
        "lora_rank=4",
        "learning_rate=5e-2",
        "weight_ema_decay=0.5",
        "eval_every=0",
        "save_every=1",
        f"log_path={run}",
    ]
    assert cli_main(argv) == 0
    return run


def test_mixture_members_are_the_later_half_or_from_a_step(kuhn_run: Path) -> None:
    assert [p.name for p in mixture_checkpoints(kuhn_run)] == ["step_000003", "step_000004"]
    assert len(mixture_checkpoints(kuhn_run, 0)) == 4
    with pytest.raises(CheckpointNotFound, match="no checkpoint at or after step 9"):
        mixture_checkpoints(kuhn_run, 9)


def test_mixture_exploitability_is_the_reach_weighted_average(kuhn_run: Path) -> None:
    members = [make_checkpoint_agent(str(p)) for p in mixture_checkpoints(kuhn_run, 1)]
    tables = []
    for m in members:
        dists = model_kuhn_exploitability(m)["distributions"]
        tables.append(kuhn_tabular_policy(lambda info, seat, d=dists: d[info]))
    expected = average_policy_report("kuhn_poker", tables)
    report = mixture_exploitability(KUHN, members)
    assert report["exploitability"] == pytest.approx(expected["exploitability"], abs=1e-12)
    assert report["members"] == 4 and len(report["member_exploitability"]) == 4
    # A mixture of one member is that member.
    alone = mixture_exploitability(KUHN, members[-1:])
    live = model_kuhn_exploitability(members[-1])["exploitability"]
    assert alone["exploitability"] == pytest.approx(live, abs=1e-12)


def test_a_mixture_plays_each_game_with_one_member(kuhn_run: Path) -> None:
    members = [make_checkpoint_agent(str(p)) for p in mixture_checkpoints(kuhn_run, 1)]
    mixture = MixturePolicy(members, "mix")
    drawn = [mixture.member_index(make(KUHN, seed=s)) for s in range(400)]
    assert set(drawn) == {0, 1, 2, 3}  # uniform over the members
    assert all(60 < drawn.count(k) < 140 for k in range(4))
    state = make(KUHN, seed=7)
    before = mixture.member_index(state)
    state.apply_action(state.legal_actions()[0])  # the same game: the same member
    assert mixture.member_index(state) == before
    turns = mixture.take_turns([make(KUHN, seed=s) for s in range(8)], seed=0)
    assert len(turns) == 8 and all(t.move in ("[check]", "[bet]") for t in turns)


@pytest.mark.parametrize("weights", ["mixture", "averaged"])
def test_eval_weights_from_the_command_line(
    kuhn_run: Path, weights: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = kuhn_run.parent / f"{weights}.json"
    argv = ["eval", f"checkpoint={kuhn_run}", f"weights={weights}", "games=2", f"out={out}"]
    assert cli_main([*argv, "exploitability=true", "opponents=random"]) == 0
    report = json.loads(out.read_text())
    exact = report["exploitability"][KUHN]
    assert 0.0 < exact["exploitability"] <= 2.0
    if weights == "mixture":
        assert len(report["candidate"]["members"]) == 2 and exact["members"] == 2
        assert "mixture_3-4" in report["candidate"]["name"]
    else:
        assert report["candidate"]["name"].endswith("averaged")
    assert "exploitability" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (("weights=mixture", "mixture_from=99"), "no checkpoint at or after step 99"),
        (("mixture_from=2",), "mixture_from chooses the iterates of weights=mixture"),
        (("weights=mixture", "math=gsm8k"), "math benchmarks score one model"),
    ],
)
def test_eval_weights_refusals_are_one_line(
    kuhn_run: Path, extra: tuple[str, ...], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["eval", f"checkpoint={kuhn_run}", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_averaged_weights_of_a_run_that_kept_none_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    argv = ["train", f"model_name={tiny_model_dir()}", f"env_ids={KUHN}", "template=chat"]
    argv += ["answer_format=constrained", "rollout=full_width", "max_tokens=4", "max_steps=1"]
    argv += ["lora_rank=4", "eval_every=0", "save_every=1", f"log_path={run}"]
    assert cli_main(argv) == 0
    capsys.readouterr()
    assert cli_main(["eval", f"checkpoint={run}", "weights=averaged"]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds no averaged weights" in err and len(err.splitlines()) == 1


def test_a_damaged_member_names_the_mixture_that_leaves_it_out(
    kuhn_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mixture member that fails its manifest is refused with the mixture_from that
    starts after it (not "an earlier one", which would still hold it)."""
    run = tmp_path / "run"
    shutil.copytree(kuhn_run, run)
    weights = run / "checkpoints" / "step_000003" / "learner" / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert cli_main(["eval", f"checkpoint={run}", "weights=mixture", "games=2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "step_000003 is damaged" in err and "mixture_from=4" in err
    assert len(err.splitlines()) == 1
    argv = ["eval", f"checkpoint={run}", "weights=mixture", "mixture_from=4", "games=2"]
    assert cli_main([*argv, "opponents=random", f"out={tmp_path / 'out.json'}"]) == 0
