"""Config parsing: original names, presets, clear errors for bad input."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from spiral.cli import main as cli_main
from spiral.train.config import PRESETS, ConfigError, parse_config


def test_original_style_command_line() -> None:
    cfg = parse_config(
        [
            "model_name=Qwen/Qwen3-4B-Base",
            "env_ids=TicTacToe-v0,KuhnPoker-v1",
            "batch_size=128",
            "learning_rate=4e-5",
        ]
    )
    assert cfg.env_ids == ("TicTacToe-v0", "KuhnPoker-v1")
    assert cfg.games_per_step == 64 and cfg.num_steps == 400  # 51200 // 128, as the original
    assert cfg.learning.role_baseline_ema_gamma == 0.95 and cfg.loss_fn == "importance_sampling"


def test_preset_then_explicit_keys_win() -> None:
    cfg = parse_config(["preset=embedded-tictactoe", "batch_size=8"])
    assert cfg.batch_size == 8
    assert cfg.max_tokens == int(PRESETS["embedded-tictactoe"]["max_tokens"])


def test_last_preset_wins() -> None:
    cfg = parse_config(["preset=embedded-kuhn", "preset=embedded-tictactoe"])
    assert cfg.env_ids == ("TicTacToe-v0",) and cfg.preset == "embedded-tictactoe"


def test_make_train_uses_a_known_preset() -> None:
    import re
    from pathlib import Path

    makefile = (Path(__file__).parents[2] / "Makefile").read_text()
    presets = re.findall(r"spiral train preset=(\S+)", makefile)
    assert presets and all(p in PRESETS for p in presets)
    for name in presets:
        parse_config([f"preset={name}"])  # every preset is a valid config


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bogus=1"], "bogus"),
        (["answer_format=xml"], "boxed, bracket, constrained"),
        (["batch_size=3"], "even"),
        (["role_baseline_ema_gamma=1.0"], "(0, 1)"),
        (["preset=nope"], "embedded-tictactoe"),
        (["lora_rank"], "key=value"),
        (["use_llm_obs_wrappers=True,False"], "one per env"),
        (["lr_staleness=inverse"], "lr_staleness=inverse: retired"),  # did not help
        (["step_kl_max=0.05"], "step_kl_max=0.05: retired"),  # did not help
        (["share_prefix=false"], "share_prefix=false: always on now"),
        (["loss_fn=truncated_importance_sampling"], "retired"),
    ],
)
def test_bad_config_says_what_to_do(args: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_config(args)


def test_unknown_game_lists_known_ids() -> None:
    # Refused when the command line is parsed, before anything loads.
    with pytest.raises(ConfigError, match="did you mean TicTacToe-v0"):
        parse_config(["env_ids=TicTacToe-v9"])


def test_cli_reports_config_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["train", "invalid_move_policy=lenient"]) == 2
    assert "strict" in capsys.readouterr().err
    assert cli_main(["train", "--help"]) == 0
    assert "role_baseline_ema_gamma" in capsys.readouterr().out


def test_regularised_learning_keys_parse_and_validate() -> None:
    cfg = parse_config(
        [
            "entropy_coef=0.3",
            "entropy_coef_final=0.05",
            "max_steps=11",
            "kl_coef=0.1",
            "kl_reference=uniform",
            "num_substeps=4",
            "balanced_chance=true",
            "prompt_style=focused",
        ]
    )
    assert cfg.entropy_coef_at(0) == pytest.approx(0.3)
    assert cfg.entropy_coef_at(5) == pytest.approx(0.175)
    assert cfg.entropy_coef_at(10) == pytest.approx(0.05)
    assert parse_config(["entropy_coef=0.2"]).entropy_coef_at(7) == 0.2  # constant
    ramp = parse_config(["kl_coef=0", "kl_coef_final=0.1", "max_steps=11"])
    assert [ramp.kl_coef_at(s) for s in (0, 5, 10, 20)] == pytest.approx([0, 0.05, 0.1, 0.1])
    assert cfg.kl_coef_at(9) == pytest.approx(0.1)  # constant without kl_coef_final
    fading = parse_config(
        ["private_centering=0.95", "private_centering_final=0.45", "max_steps=11"]
    )
    assert [fading.private_centering_at(s) for s in (0, 5, 10)] == pytest.approx([0.95, 0.7, 0.45])
    assert parse_config(["private_centering=0.8"]).private_centering_at(50) == 0.8
    for bad, hint in (
        ("kl_reference=base", "reference, uniform"),
        ("prompt_style=short", "original, focused, brief"),
        ("num_substeps=0", "> 0"),
        ("entropy_coef=-1", ">= 0"),
        ("entropy_coef_final=-0.1", ">= 0"),
        ("kl_coef_final=-0.1", "kl_coef_final must be >= 0"),
    ):
        with pytest.raises(ConfigError, match=hint):
            parse_config([bad])


def test_learning_rate_schedules() -> None:
    base = ["learning_rate=1e-3", "max_steps=10"]
    assert parse_config(base).learning_rate_at(9) == pytest.approx(1e-3)
    linear = parse_config([*base, "lr_schedule=linear"])
    assert [linear.learning_rate_at(s) for s in (0, 5)] == pytest.approx([1e-3, 5e-4])
    cosine = parse_config([*base, "lr_schedule=cosine"])
    assert [cosine.learning_rate_at(s) for s in (0, 5)] == pytest.approx([1e-3, 5e-4])
    assert cosine.learning_rate_at(9) == pytest.approx(1e-3 * 0.5 * (1 + math.cos(0.9 * math.pi)))
    step = parse_config([*base, "lr_schedule=step", "lr_step_at=4", "lr_step_factor=0.1"])
    assert [step.learning_rate_at(s) for s in (0, 3, 4, 9)] == pytest.approx(
        [1e-3, 1e-3, 1e-4, 1e-4]
    )
    with pytest.raises(ConfigError, match="lr_step_at > 0"):
        parse_config([*base, "lr_schedule=step"])
    with pytest.raises(ConfigError, match="constant, linear, cosine, step"):
        parse_config(["lr_schedule=staircase"])


def test_the_exact_shortcuts_are_on_and_one_switch_turns_them_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spiral.testing import make_tiny_model
    from spiral.train.setup import make_learner_factory

    tiny_llama = make_tiny_model(tmp_path / "llama", arch="llama")
    cfg = parse_config([f"model_name={tiny_llama}", "lora_rank=4"])
    for switch, expected in ((None, True), ("0", False)):
        if switch is not None:
            monkeypatch.setenv("SPIRAL_EXACT_SHORTCUTS", switch)
        learner = make_learner_factory(cfg)()
        assert learner.share_prefix is expected
        assert learner.sampler().prefix_reuse is expected
        assert learner.sampler().merge_lora is expected
        assert learner.sampler().packed_decode is expected


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_a_valid_config(name: str) -> None:
    cfg = parse_config([f"preset={name}"])
    assert cfg.preset == name
    typed = parse_config([f"{k}={v}" for k, v in PRESETS[name].items()]).to_json()
    for key in PRESETS[name]:  # each of its values applied as if typed on the command line
        assert cfg.to_json()[key] == typed[key], key


def test_the_papers_preset_is_the_papers_setting() -> None:
    cfg = parse_config(["preset=qwen3-4b-spiral"])
    assert cfg.model_name == "Qwen/Qwen3-4B-Base"
    assert cfg.env_ids == ("TicTacToe-v0", "KuhnPoker-v1", "SimpleNegotiation-v1")
    assert (cfg.template, cfg.answer_format) == ("qwen3", "boxed")
    assert cfg.games_per_step == 64 and cfg.num_steps == 400
    assert (
        cfg.regularizer.entropy_coef == 0.0 and cfg.regularizer.kl_coef == 0.0
    )  # the original had no regulariser


def test_the_async_loop_defaults_to_a_kl_trust_region() -> None:
    assert parse_config([]).learning.lr_kl_target == 0.0
    assert parse_config(["use_async_actor_learner=true"]).learning.lr_kl_target == 0.05
    given = parse_config(["lr_kl_target=0", "use_async_actor_learner=true"])
    assert given.learning.lr_kl_target == 0.0  # a value given (anywhere) is kept
    preset = parse_config(["preset=embedded-kuhn", "use_async_actor_learner=true"])
    assert preset.learning.lr_kl_target == 0.05
    assert parse_config(["use_async_actor_learner=false"]).learning.lr_kl_target == 0.0
