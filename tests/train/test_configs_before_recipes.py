"""Run folders written before recipes, schedules and optional modes still resume.

The files under tests/data/configs-before-recipes/ are the config.json that the version of
Spiral before them wrote for `preset=embedded-kuhn`, `preset=embedded-tictactoe` and an
async run with a linear learning rate and a fading KL (flat keys, `lr_schedule`,
`*_final`, `fsp_enabled=false` beside every population key). Resume compares such a file
with today's config of the same run; it must find them the same, and still refuse a change.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spiral.train.config import ConfigError, parse_config
from spiral.train.resume import check_resume_config

DATA = Path(__file__).parents[1] / "data" / "configs-before-recipes"
TODAY = {
    # the preset has changed since these files were written: the words of its keys then
    "embedded-kuhn": [
        "recipe=embedded-kuhn",
        "rollout=sampled",
        "prompt_style=focused",
        "max_steps=120",
        "learning_rate=1e-3*0.3@30",
        "entropy_coef=0.3->0.1",
        "kl_coef=0->0.6",
        "private_centering=0.95->0.5",
        "move_floor=0",
        "move_floor_coef=0",
    ],
    "embedded-tictactoe": ["recipe=embedded-tictactoe"],
    "async-linear-lr": [
        "use_async_actor_learner=true",
        "num_actors=2",
        "learning_rate=3e-4->0",
        "max_steps=50",
        "kl_coef=0.1->0",
    ],
}


def _saved(name: str) -> dict[str, object]:
    return json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(TODAY))
def test_a_run_folder_from_before_resumes_with_todays_keys(name: str) -> None:
    saved = _saved(name)
    assert "lr_schedule" in saved and "fsp_pool_size" in saved  # the earlier vocabulary
    check_resume_config(saved, parse_config(TODAY[name]).to_json(), same_run=True)


@pytest.mark.parametrize(
    ("name", "change", "key"),
    [
        ("embedded-kuhn", "entropy_coef=0.3->0.2", "entropy_coef"),
        ("embedded-kuhn", "learning_rate=1e-3*0.3@40", "learning_rate"),
        ("embedded-kuhn", "fsp_enabled=true", "fsp_enabled"),
        ("embedded-tictactoe", "fsp_pool_size=3", "fsp_pool_size"),
        ("async-linear-lr", "num_actors=3", "num_actors"),
    ],
)
def test_a_changed_run_is_still_refused(name: str, change: str, key: str) -> None:
    new = parse_config([*TODAY[name], change]).to_json()
    with pytest.raises(ConfigError, match=f"cannot resume this run folder with {key}="):
        check_resume_config(_saved(name), new, same_run=True)


def test_a_run_from_before_the_floor_says_how_to_resume_without_it() -> None:
    """Resumed with today's preset alone, such a run is refused with the keys to add."""
    with pytest.raises(ConfigError) as refused:
        check_resume_config(
            _saved("embedded-kuhn"),
            parse_config(["recipe=embedded-kuhn"]).to_json(),
            same_run=True,
        )
    assert "move_floor=0" in str(refused.value)


def test_the_earlier_command_lines_give_todays_configs() -> None:
    """The earlier keys, typed as before, parse to the same config as today's words."""
    for name, earlier in (
        (
            "embedded-kuhn",
            [
                "preset=embedded-kuhn",
                "rollout=sampled",
                "prompt_style=focused",
                "max_steps=120",
                "learning_rate=1e-3",
                "lr_schedule=step",
                "lr_step_at=30",
                "lr_step_factor=0.3",
                "entropy_coef=0.3",
                "entropy_coef_final=0.1",
                "kl_coef=0",
                "kl_coef_final=0.6",
                "private_centering=0.95",
                "private_centering_final=0.5",
                "move_floor=0",
                "move_floor_coef=0",
            ],
        ),
        (
            "async-linear-lr",
            [
                "use_async_actor_learner=true",
                "num_actors=2",
                "lr_schedule=linear",
                "learning_rate=3e-4",
                "max_steps=50",
                "kl_coef=0.1",
                "kl_coef_final=0.0",
            ],
        ),
    ):
        assert parse_config(earlier) == parse_config(TODAY[name])


@pytest.mark.parametrize(
    "words",
    [
        ["learning_rate=cosine:1e-3->1e-5", "lr_step_at=50"],
        ["learning_rate=1e-3*0.3@30*0.1@60", "lr_schedule=step"],
        ["learning_rate=cosine:1e-3->1e-5", "lr_schedule=linear"],
        ["entropy_coef=cosine:0.3->0.2", "entropy_coef_final=0.1"],
    ],
)
def test_an_earlier_key_never_rewrites_a_schedule_it_cannot_express(words: list[str]) -> None:
    with pytest.raises(ConfigError, match="give the schedule alone"):
        parse_config(words)
    # where it can, it still folds: a recipe's constant rate given a drop, its linear
    # fade ended lower
    words = ["recipe=embedded-tictactoe", "lr_schedule=step", "lr_step_at=40"]
    cfg = parse_config([*words, "entropy_coef_final=0.05"])
    assert (str(cfg.learning_rate), str(cfg.regularizer.entropy_coef)) == (
        "0.0003*0.1@40",
        "0.1->0.05",
    )


def test_a_refused_resume_writes_values_as_the_command_line_does() -> None:
    """What to pass back is written as it would be typed: lists comma-separated, true and
    false in lower case, no Python quotes."""
    from spiral.args import flat_json

    saved = flat_json(parse_config(["env_ids=KuhnPoker-v1,TicTacToe-v0", "balanced_chance=true"]))
    for words, want in (
        (["env_ids=KuhnPoker-v1", "balanced_chance=true"], "env_ids=KuhnPoker-v1,TicTacToe-v0"),
        (["env_ids=KuhnPoker-v1,TicTacToe-v0"], "balanced_chance=true"),
    ):
        new = flat_json(parse_config(words))
        with pytest.raises(ConfigError) as refused:
            check_resume_config(saved, new, same_run=True)
        message = str(refused.value)
        assert f"pass {want} to continue" in message
        assert "'" not in message and "True" not in message and "[" not in message
