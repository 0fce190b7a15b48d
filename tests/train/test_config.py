"""Config parsing: original names, presets, clear errors for bad input."""

from __future__ import annotations

from pathlib import Path

import chz
import pytest

from spiral.algo import schedule
from spiral.cli import main as cli_main
from spiral.train.config import ConfigError, parse_config
from spiral.train.recipes import RECIPES, words


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
    assert cfg.max_tokens == RECIPES["embedded-tictactoe"]().max_tokens


def test_two_recipes_are_one_line_and_one_named_twice_is_one() -> None:
    """A recipe sets many keys at once, so two of them (by `recipe=`, the original's
    `preset=`, or both) is a question, not an override; the same one twice is fine."""
    for first, second in (("preset", "preset"), ("recipe", "preset"), ("preset", "recipe")):
        with pytest.raises(ConfigError, match="embedded-kuhn and embedded-tictactoe: give one"):
            parse_config([f"{first}=embedded-kuhn", f"{second}=embedded-tictactoe"])
    cfg = parse_config(["recipe=embedded-tictactoe", "preset=embedded-tictactoe"])
    assert cfg.env_ids == ("TicTacToe-v0",) and cfg.recipe == "embedded-tictactoe"


def test_help_for_an_unknown_recipe_is_its_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["train", "recipe=nope", "--help"]) == 2
    err = capsys.readouterr().err
    assert "unknown recipe 'nope'" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("word", ["TRUE", "True", "true", "1", "FALSE", "False", "0"])
def test_a_switch_takes_true_and_false_in_any_case(word: str) -> None:
    cfg = parse_config([f"fsp_enabled={word}"])
    assert (cfg.population is not None) == (word.lower() in ("true", "1"))


def test_a_mode_set_off_still_checks_its_keys_values() -> None:
    """The original's configs carry every mode's keys beside a switch set off; they are
    dropped, but a value its key could never take is still one line."""
    assert parse_config(["fsp_enabled=false", "fsp_pool_size=5"]).population is None
    with pytest.raises(ConfigError, match="fsp_pool_size='abc' is not valid: expected an int"):
        parse_config(["fsp_enabled=false", "fsp_pool_size=abc"])
    with pytest.raises(ConfigError, match="replay_buffer_max_staleness=.x."):
        parse_config(["use_async_actor_learner=0", "replay_buffer_max_staleness=x"])


@pytest.mark.parametrize("schedule_kind", ["step", "constant"])
def test_a_fractional_step_is_refused_not_truncated(schedule_kind: str) -> None:
    with pytest.raises(ConfigError, match="lr_step_at='2.7' is not valid: expected an integer"):
        parse_config([f"lr_schedule={schedule_kind}", "lr_step_at=2.7"])
    cfg = parse_config(["learning_rate=1e-3", "lr_schedule=step", "lr_step_at=30"])
    assert cfg.learning_rate.drops == ((30, 0.1),)


def test_make_train_uses_a_known_preset() -> None:
    import re
    from pathlib import Path

    makefile = (Path(__file__).parents[2] / "Makefile").read_text()
    presets = re.findall(r"spiral train recipe=(\S+)", makefile)
    assert presets and all(p in RECIPES for p in presets)
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
        (["recipe=nope"], "unknown recipe"),
        (["fsp_pool_size=3"], "needs fsp_enabled=true"),
        (["learning_rate=1e-3->"], "not a schedule"),
        (["private_centering=0.5->1"], "must stay in"),
        (["lora_rank"], "key=value"),
        (["use_llm_obs_wrappers=True,False"], "one per env"),
        (["lr_staleness=inverse"], "lr_staleness=inverse: retired"),  # did not help
        (["step_kl_max=0.05"], "step_kl_max=0.05: retired"),  # did not help
        (["share_prefix=false"], "share_prefix=false: always on now"),
        (["loss_fn=truncated_importance_sampling"], "retired"),
        (["answer_format=constrained", "move_floor=0.1"], "both move_floor"),
        (["answer_format=constrained", "move_floor_coef=0.2"], "both move_floor"),
        (["answer_format=constrained", "move_floor=0.5", "move_floor_coef=0.2"], "below 0.5"),
        (["answer_format=bracket", "move_floor=0.1", "move_floor_coef=0.2"], "constrained"),
        (["move_floor=-0.1"], ">= 0"),
        (["move_floor=nan"], "nan"),
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
    assert cli_main(["train", "--help", "all"]) == 0
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

    def at(value: schedule.Schedule, steps: tuple[int, ...], c=cfg) -> list[float]:
        return [c.at(value, s) for s in steps]

    assert at(cfg.regularizer.entropy_coef, (0, 5, 10)) == pytest.approx([0.3, 0.175, 0.05])
    constant = parse_config(["entropy_coef=0.2"])
    assert constant.at(constant.regularizer.entropy_coef, 7) == 0.2
    ramp = parse_config(["kl_coef=0", "kl_coef_final=0.1", "max_steps=11"])
    assert at(ramp.regularizer.kl_coef, (0, 5, 10, 20), ramp) == pytest.approx([0, 0.05, 0.1, 0.1])
    assert ramp.regularizer.kl_coef == parse_config(["kl_coef=0->0.1"]).regularizer.kl_coef
    assert at(cfg.regularizer.kl_coef, (9,)) == pytest.approx([0.1])  # constant
    fading = parse_config(
        ["private_centering=0.95", "private_centering_final=0.45", "max_steps=11"]
    )
    assert at(fading.learning.private_centering, (0, 5, 10), fading) == pytest.approx(
        [0.95, 0.7, 0.45]
    )
    floored = parse_config(["recipe=embedded-kuhn"])
    assert (floored.regularizer.move_floor, floored.regularizer.move_floor_coef) == (0.05, 0.2)
    off = parse_config(["recipe=embedded-kuhn", "move_floor=0", "move_floor_coef=0"])
    assert (off.regularizer.move_floor, off.regularizer.move_floor_coef) == (0.0, 0.0)
    for bad, hint in (
        ("kl_reference=base", "reference, uniform"),
        ("prompt_style=short", "original, focused, brief"),
        ("num_substeps=0", "> 0"),
        ("entropy_coef=-1", ">= 0"),
        ("entropy_coef_final=-0.1", ">= 0"),
        ("kl_coef_final=-0.1", "kl_coef must stay >= 0"),
        ("kl_coef_final=nan", "kl_coef_final='nan' is not valid"),
    ):
        with pytest.raises(ConfigError, match=hint):
            parse_config([bad])


def test_learning_rate_schedules() -> None:
    def lr(words: list[str], steps: tuple[int, ...]) -> list[float]:
        cfg = parse_config(["max_steps=11", *words])
        return [cfg.at(cfg.learning_rate, s) for s in steps]

    assert lr(["learning_rate=1e-3"], (0, 10)) == pytest.approx([1e-3, 1e-3])
    assert lr(["learning_rate=1e-3->0"], (0, 5, 10)) == pytest.approx([1e-3, 5e-4, 0])
    assert lr(["learning_rate=cosine:1e-3->0"], (0, 5, 10)) == pytest.approx([1e-3, 5e-4, 0])
    assert lr(["learning_rate=1e-3*0.1@4"], (0, 3, 4, 9)) == pytest.approx([1e-3, 1e-3, 1e-4, 1e-4])
    # Spiral's earlier keys still parse, into the same schedules
    earlier = ["learning_rate=1e-3", "lr_schedule=step", "lr_step_at=4", "lr_step_factor=0.1"]
    assert lr(earlier, (0, 3, 4, 9)) == lr(["learning_rate=1e-3*0.1@4"], (0, 3, 4, 9))
    assert lr(["learning_rate=1e-3", "lr_schedule=linear"], (5,)) == pytest.approx([5e-4])
    with pytest.raises(ConfigError, match="lr_step_at > 0"):
        parse_config(["learning_rate=1e-3", "lr_schedule=step"])
    with pytest.raises(ConfigError, match="constant, linear, cosine, step"):
        parse_config(["lr_schedule=staircase"])


def test_the_exact_shortcuts_are_always_on_in_a_run(tmp_path: Path) -> None:
    """A shared prefix, sampling with the adapter merged in and the packed decode step give
    the plain path's numbers (tested where each is built) and a run has no way to turn
    them off; the engine's constructor flags do, for tests and benchmarks."""
    from spiral.testing import make_tiny_model
    from spiral.train.setup import make_learner_factory

    tiny_llama = make_tiny_model(tmp_path / "llama", arch="llama")
    cfg = parse_config([f"model_name={tiny_llama}", "lora_rank=4"])
    learner = make_learner_factory(cfg)()
    sampler = learner.sampler()
    assert learner.share_prefix and sampler.prefix_reuse
    assert sampler.merge_lora and sampler.packed_decode
    with pytest.raises(ConfigError, match="share_prefix=false: always on now"):
        parse_config(["share_prefix=false"])


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_is_its_words_on_the_command_line(name: str) -> None:
    cfg = parse_config([f"recipe={name}"])
    assert cfg.recipe == name and parse_config([f"preset={name}"]) == cfg
    typed = parse_config([f"{k}={v}" for k, v in words(name).items()])
    assert chz.replace(typed, recipe=name) == cfg  # its values typed as words: the same
    assert cfg == chz.replace(RECIPES[name](), recipe=name)  # the recipe's own code


def test_the_papers_preset_is_the_papers_setting() -> None:
    cfg = parse_config(["recipe=qwen3-4b-spiral"])
    assert cfg.model_name == "Qwen/Qwen3-4B-Base"
    assert cfg.env_ids == ("TicTacToe-v0", "KuhnPoker-v1", "SimpleNegotiation-v1")
    assert (cfg.template, cfg.answer_format) == ("qwen3", "boxed")
    assert cfg.games_per_step == 64 and cfg.num_steps == 400
    assert cfg.regularizer.entropy_coef.is_off and cfg.regularizer.kl_coef.is_off
    # the original had no regulariser


def test_the_async_loop_defaults_to_a_kl_trust_region() -> None:
    assert parse_config([]).learning.lr_kl_target == 0.0
    assert parse_config(["use_async_actor_learner=true"]).learning.lr_kl_target == 0.05
    given = parse_config(["lr_kl_target=0", "use_async_actor_learner=true"])
    assert given.learning.lr_kl_target == 0.0  # a value given (anywhere) is kept
    preset = parse_config(["preset=embedded-leduc", "use_async_actor_learner=true"])
    assert preset.learning.lr_kl_target == 0.05
    assert parse_config(["use_async_actor_learner=false"]).learning.lr_kl_target == 0.0


def test_a_run_says_which_dtype_auto_chose() -> None:
    from spiral.train.run import compute_line

    line = compute_line(parse_config(["recipe=embedded-kuhn", "device=cpu"]))
    assert line.startswith("compute: cpu, dtype=auto -> float32 (bf16 not native")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["batch_size=1_000"], "expected an integer"),
        (["batch_size=٨"], "expected an integer"),
        (["device=cuda:٣"], "cuda:N"),
        (["num_train_datapoints=64"], "would have no steps"),
        (["eval_temperature=-3"], "eval_temperature must be >= 0"),
        (["lr_step_at=30", "lr_step_factor=0.1"], "does nothing without lr_schedule=step"),
        (["lr_schedule=step", "lr_step_at=99999999999999999999999999"], "expected an integer"),
        (["lr_schedule=step", "lr_step_at=3e1"], "expected an integer"),
        (["learning_rate=1e-3*0.1@99999999999999999999999999"], "not a schedule"),
        (["learning_rate=1e-3*0.1@10", "lr_step_factor=0.5"], "schedule already"),
        (["entropy_coef=0.01->0.5", "entropy_coef_final=0"], "has its end already"),
    ],
)
def test_what_a_stranger_tried_is_one_line(args: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(args)


def test_an_earlier_key_still_adjusts_a_recipes_schedule() -> None:
    """A recipe's schedule is the user's to adjust with the original's keys."""
    cfg = parse_config(["recipe=embedded-tictactoe", "lr_schedule=step", "lr_step_at=40"])
    assert cfg.learning_rate.drops == ((40, 0.1),)
    cfg = parse_config(["recipe=embedded-tictactoe", "entropy_coef_final=0.05"])
    assert str(cfg.regularizer.entropy_coef) == "0.1->0.05"
    assert (
        str(parse_config(["entropy_coef=0.3", "entropy_coef_final=0.1"]).regularizer.entropy_coef)
        == "0.3->0.1"
    )


def test_an_empty_item_in_a_list_is_none(capsys: pytest.CaptureFixture[str]) -> None:
    """`stop=],` is the stop string "]" (an empty stop string would end every reply)."""
    from spiral.args import flat_json

    assert flat_json(parse_config(["stop=],"]))["stop"] == ["]"]
    assert flat_json(parse_config(["stop=,,,"]))["stop"] == []
    assert parse_config(["fsp_enabled=false", "fsp_pool_size=5"]).population is None
    assert "fsp_pool_size does nothing with fsp_enabled=false" in capsys.readouterr().err


def test_tinker_refuses_regularisers_before_anything_runs() -> None:
    """The hosted engine computes none of the regularisers: refused with the machine
    checks, before a model is loaded or a game played."""
    from spiral.train.setup import check_machine

    base = ["engine=tinker", "model_name=embedded", "weight_ema_decay=0"]
    check_machine(parse_config(base))  # nothing regularised: fine
    for extra in (
        ["entropy_coef=0.1"],
        ["kl_coef=0->0.5"],
        ["answer_format=constrained", "move_floor=0.1", "move_floor_coef=0.2"],
    ):
        with pytest.raises(ConfigError, match="with engine=tinker set entropy_coef=0"):
            check_machine(parse_config(base + extra))
    with pytest.raises(ConfigError, match="at temperature 1: set temperature=1"):
        check_machine(parse_config([*base, "temperature=0.5"]))


@pytest.mark.parametrize("kind", ["constant", "linear", "cosine"])
@pytest.mark.parametrize("key", ["lr_step_at=30", "lr_step_factor=0.5"])
def test_an_earlier_step_key_that_its_schedule_would_ignore_is_one_line(
    kind: str, key: str
) -> None:
    """`lr_step_at` and `lr_step_factor` are read by `lr_schedule=step` alone: beside
    another kind they were dropped without a word. Typed, they are refused in one line
    naming the key and the form to use; a config.json of an earlier run, which wrote all
    three keys whatever the kind, still folds."""
    with pytest.raises(ConfigError) as refused:
        parse_config(["learning_rate=1e-3", f"lr_schedule={kind}", key])
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{key} does nothing with lr_schedule={kind}")
    assert "learning_rate=" in message  # the one key to use instead
    saved = {"learning_rate": 1e-3, "lr_schedule": kind, "lr_step_at": 30, "lr_step_factor": 0.5}
    from spiral.train.legacy_keys import fold

    assert schedule.parse(fold(saved)["learning_rate"]).kind == kind
