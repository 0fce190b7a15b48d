"""`rollout=full_width` on a tiny model: its update is the limit of sampled updates, its
rows are the rows sampling makes, and what cannot be expanded is refused in one line."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import pytest
import torch

from spiral.algo.assemble import assemble
from spiral.algo.losses import get_loss
from spiral.algo.merge import merge_identical
from spiral.algo.rae import Baselines, rae_advantages
from spiral.algo.regularizers import Regularizer
from spiral.engines.base import SamplingParams
from spiral.errors import UsageError
from spiral.train.config import parse_config
from spiral.train.full_width import FullWidth
from spiral.train.loop import train
from spiral.train.setup import build_setup, make_learner_factory
from spiral.train.step import POLICY, collect
from spiral.types import Datum

from .test_e2e import tiny_args, tiny_model  # noqa: F401  (fixture)

KUHN = "KuhnPokerSingle-v0"


def _config(model: Path, log_path: Path, *extra: str):  # type: ignore[no-untyped-def]
    args = [*tiny_args(model, log_path, 1, envs=KUHN), "answer_format=constrained", *extra]
    return parse_config(args)


def _gradient(learner, datums: list[Datum], reg: Regularizer) -> torch.Tensor:  # type: ignore[no-untyped-def]
    loss_fn = functools.partial(get_loss("importance_sampling"), clip=0.2)
    learner.forward_backward(datums, loss_fn, reg)
    grads = [p.grad.flatten() for _, p in learner._named_trainable() if p.grad is not None]
    learner.model.zero_grad(set_to_none=True)
    return torch.cat(grads).double()


def _sampled_rows(cfg, setup, learner, games: int, step: int) -> list[Datum]:  # type: ignore[no-untyped-def]
    episodes, _ = collect(cfg, setup, learner, step, games=games)
    advantages, _, _ = rae_advantages(
        episodes, Baselines({}), decay=0.95, use_baseline=False, trained_agents={POLICY}
    )
    datums, _ = assemble(episodes, advantages)
    return merge_identical(datums)[0]


def _full_width(cfg, setup, learner) -> FullWidth:  # type: ignore[no-untyped-def]
    policy = setup.policy(learner.sampler(), SamplingParams(max_tokens=6), POLICY)
    return FullWidth(cfg, policy, setup.game_params)


def test_full_width_update_is_the_limit_of_sampled_updates(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The gradient of one full-width step (policy gradient and entropy bonus) against
    the mean gradient of k sampled steps of 96 hands each: the error shrinks as k grows
    (16, 32, 64 steps), and 64 steps (6,144 hands) are within 10% of it. Single sampled
    steps are heavy-tailed (a rare move drawn moves its log-prob a lot), so one step's
    error says little; their mean converges."""
    cfg = _config(tiny_model, tmp_path / "run", "balanced_chance=true")
    setup = build_setup(cfg)
    learner = make_learner_factory(cfg)()
    reg = Regularizer(entropy_coef=0.1)
    exact_rows, _ = _full_width(cfg, setup, learner).rows(learner)
    exact = _gradient(learner, exact_rows, reg)
    assert float(exact.norm()) > 0
    total, errors = torch.zeros_like(exact), {}
    for k in range(1, 65):
        total += _gradient(learner, _sampled_rows(cfg, setup, learner, 96, 9 + k), reg)
        if k in (1, 16, 32, 64):
            errors[k] = float((total / k - exact).norm() / exact.norm())
    assert errors[16] > errors[32] > errors[64], errors
    assert errors[64] < 0.1 and errors[64] < errors[1] / 3, errors


def test_full_width_rows_are_the_rows_sampling_makes(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A sampled turn and the full-width row of the same prompt and move hold the same
    ids, sampler log-probs, mask and constraint; full width adds the weight: reach x
    pi(move), summing to the decisions a game makes on average."""
    cfg = _config(tiny_model, tmp_path / "run")
    setup = build_setup(cfg)
    learner = make_learner_factory(cfg)()
    rows, metrics = _full_width(cfg, setup, learner).rows(learner)
    assert len(rows) == 24  # 12 information states x 2 moves
    by_ids = {(d.input_ids, d.target_ids): d for d in rows}
    episodes, _ = collect(cfg, setup, learner, 0, games=16)
    advantages, _, _ = rae_advantages(episodes, Baselines({}), 0.95, trained_agents={POLICY})
    sampled, _ = assemble(episodes, advantages)
    assert sampled
    for d in sampled:
        twin = by_ids[(d.input_ids, d.target_ids)]
        assert twin.mask == d.mask and twin.constraint == d.constraint
        assert twin.constraint_start == d.constraint_start
        assert twin.sampler_logprobs == pytest.approx(d.sampler_logprobs, abs=1e-5)
    total = math.fsum(d.weight for d in rows)
    decisions = metrics[f"full_width/{KUHN}/decisions_per_game"]
    assert total == pytest.approx(decisions) and 2.0 < decisions < 3.0


def test_a_full_width_run_trains_checkpoints_and_resumes_exactly(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    def run(folder: Path, steps: int) -> list[dict]:
        args = [*tiny_args(tiny_model, folder, steps, envs=KUHN), "answer_format=constrained"]
        cfg = parse_config([*args, "rollout=full_width", "entropy_coef=0.1"])
        train(cfg, build_setup(cfg), make_learner_factory(cfg), log=lambda _: None)
        from spiral.report.sinks import read_jsonl

        return read_jsonl(folder / "metrics.jsonl")

    straight = run(tmp_path / "straight", 4)
    run(tmp_path / "resumed", 2)
    resumed = run(tmp_path / "resumed", 4)
    key = f"full_width/{KUHN}/value_seat0"
    assert [r.get(key) for r in straight] == pytest.approx([r.get(key) for r in resumed])
    losses = [r["train/loss"] for r in straight if "train/loss" in r]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (("env_ids=LiarsDice-v1",), "cannot list its chance outcomes"),
        (("env_ids=TicTacToe-v0",), "more than 20,000 decisions"),
        (("answer_format=bracket",), "answer_format=constrained think_budget=0"),
        (("think_budget=8",), "answer_format=constrained think_budget=0"),
        (("fsp_enabled=true",), "population play"),
        (("num_substeps=2",), "num_substeps=1, gamma=1"),
        (("gamma=0.9",), "num_substeps=1, gamma=1"),
        (("max_turns=1",), "leave max_turns=0 and top_p=1"),  # a cut tree: no values at all
        (("top_p=0.5",), "leave max_turns=0 and top_p=1"),
        (("engine=tinker",), "engine=tinker takes sampled games"),
        (("engine=tinker", "answer_format=bracket"), "engine=tinker takes sampled games"),
    ],
)
def test_what_cannot_be_expanded_is_refused_in_one_line(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
    extra: tuple[str, ...],
    words: str,
) -> None:
    args = [*tiny_args(tiny_model, tmp_path / "run", 1, envs=KUHN), "answer_format=constrained"]
    with pytest.raises(UsageError, match=words) as err:
        cfg = parse_config([*args, "rollout=full_width", *extra])
        build_setup(cfg)
    assert "\n" not in str(err.value) and "rollout=sampled" in str(err.value)
