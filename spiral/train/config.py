"""The training configuration: one frozen chz object, parsed from `key=value` pairs.

Names and defaults follow the original SPIRAL Tinker port (`SpiralConfig`) where a field
exists there (`model_name`, `env_ids`, `batch_size`, `learning_rate`, `lora_rank`,
`max_tokens`, `loss_fn`, `role_baseline_ema_gamma`, `filter_draw`, `eval_every`,
`save_every`, `log_path`, `load_checkpoint_path`, ...). Fields the original lacks are ours.
`preset=NAME` expands to a set of values first; explicit keys override it.
Unknown keys and bad values raise `ConfigError` with the valid choices.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Sequence
from typing import Any, Literal

import chz

from spiral.errors import SpiralError
from spiral.train.presets import PRESETS

LossName = Literal["importance_sampling", "ppo"]


class ConfigError(SpiralError, ValueError):
    """A config problem, with a message that says how to fix it."""


def _choice(*valid: str) -> Any:
    def check(obj: Any, attr: str) -> None:
        value = getattr(obj, attr)
        if value not in valid:
            name = attr.removeprefix("X_")  # chz stores fields as X_<name>
            raise ConfigError(f"{name}={value!r} is not valid; choose one of {', '.join(valid)}")

    return check


def _positive(obj: Any, attr: str) -> None:
    if getattr(obj, attr) <= 0:
        raise ConfigError(f"{attr.removeprefix('X_')} must be > 0, got {getattr(obj, attr)!r}")


def _unit(obj: Any, attr: str) -> None:
    if not 0.0 < getattr(obj, attr) <= 1.0:
        raise ConfigError(
            f"{attr.removeprefix('X_')} must be in (0, 1], got {getattr(obj, attr)!r}"
        )


def _non_negative(obj: Any, attr: str) -> None:
    if getattr(obj, attr) < 0:
        raise ConfigError(f"{attr.removeprefix('X_')} must be >= 0, got {getattr(obj, attr)!r}")


def _device_name(obj: Any, attr: str) -> None:
    value = getattr(obj, attr)
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", value):
        raise ConfigError(f"device={value!r} is not valid; choose auto, cpu, cuda or cuda:N")


@chz.chz
class TrainConfig:
    # ---- model and engine --------------------------------------------------------
    model_name: str = chz.field(
        default="embedded",
        doc="hub id (e.g. Qwen/Qwen3-4B-Base), local folder, or 'embedded' (SmolLM2-135M-Instruct)",
    )
    lora_rank: int = chz.field(
        default=32, doc="LoRA rank; 0 = full fine-tuning", validator=_non_negative
    )
    lora_alpha: int = chz.field(
        default=0, doc="LoRA alpha; 0 = 2 * lora_rank", validator=_non_negative
    )
    device: str = chz.field(
        default="auto", doc="auto | cpu | cuda | cuda:N", validator=_device_name
    )
    dtype: str = chz.field(
        default="auto",
        doc="auto (fp32 on CPU, bf16 on CUDA) | float32 | bfloat16 | float16",
        validator=_choice("auto", "float32", "bfloat16", "float16"),
    )
    micro_batch_tokens: int = chz.field(
        default=4096,
        doc="tokens per learner micro-batch (gradient accumulation)",
        validator=_positive,
    )
    max_grad_norm: float = chz.field(default=1.0, doc="gradient clipping norm", validator=_positive)
    # ---- games and prompts -------------------------------------------------------
    env_ids: tuple[str, ...] = chz.field(default=("TicTacToe-v0",), doc="games, comma separated")
    use_llm_obs_wrappers: tuple[bool, ...] = chz.field(
        default=(),
        doc="per env: True = full message history, False = rules + latest state; empty = game default",
    )
    template: str = chz.field(
        default="chat", doc="prompt template: chat | qwen3 | chatml | llama3 | plain"
    )
    answer_format: str = chz.field(
        default="bracket",
        doc="boxed (original \\boxed{}) | bracket (last bracketed legal move) | constrained",
        validator=_choice("boxed", "bracket", "constrained"),
    )
    system_rules: bool = chz.field(default=False, doc="put the game rules in a system message")
    prompt_style: str = chz.field(
        default="original",
        doc="original (the game's observation + an example move, byte for byte) | focused "
        "(the situation and private information right before the answer, legal moves "
        "listed, no example)",
        validator=_choice("original", "focused"),
    )
    think_budget: int = chz.field(
        default=0,
        doc="constrained only: free reasoning tokens before the answer",
        validator=_non_negative,
    )
    max_turns: int = chz.field(
        default=0,
        doc="turn limit per game (draw); 0 = each game's default",
        validator=_non_negative,
    )
    invalid_move_policy: str = chz.field(
        default="spiral", doc="spiral (-1.5/+0.5, original) | strict (-1/+1) | loss (-1/0)"
    )
    # ---- sampling ----------------------------------------------------------------
    max_tokens: int = chz.field(default=8192, doc="max new tokens per turn", validator=_positive)
    temperature: float = chz.field(default=1.0, doc="sampling temperature", validator=_positive)
    top_p: float = chz.field(default=1.0, doc="nucleus sampling threshold")
    stop: tuple[str, ...] = chz.field(
        default=(),
        doc="stop strings, comma separated; stop=] ends a bracket reply at its first move",
    )
    # ---- learning ----------------------------------------------------------------
    batch_size: int = chz.field(
        default=128,
        doc="seat-trajectories per step, two per game (128 = 64 games)",
        validator=_positive,
    )
    num_train_datapoints: int = chz.field(
        default=51200,
        doc="total seat-trajectories; steps = this // batch_size",
        validator=_positive,
    )
    max_steps: int = chz.field(
        default=0,
        doc="if > 0, overrides num_train_datapoints // batch_size",
        validator=_non_negative,
    )
    learning_rate: float = chz.field(default=1e-4, doc="Adam learning rate", validator=_positive)
    lr_schedule: str = chz.field(
        default="constant",
        doc="constant | linear (to 0 at the end) | cosine (to 0 at the end)",
        validator=_choice("constant", "linear", "cosine"),
    )
    loss_fn: str = chz.field(
        default="importance_sampling",
        doc="importance_sampling | ppo",
        validator=_choice("importance_sampling", "ppo"),
    )
    ppo_clip: float = chz.field(default=0.2, doc="PPO clip epsilon", validator=_positive)
    num_substeps: int = chz.field(
        default=1,
        doc="optimizer steps per batch: the batch is shuffled and split into this many "
        "minibatches (tinker-cookbook's name); > 1 makes ppo's clipping active",
        validator=_positive,
    )
    entropy_coef: float = chz.field(
        default=0.0,
        doc="entropy bonus at every trained token (over the legal moves when answers are "
        "constrained)",
        validator=_non_negative,
    )
    entropy_coef_final: float | None = chz.field(
        default=None,
        doc="if set, entropy_coef moves linearly to this value over the run (a strong "
        "bonus early keeps the policy stochastic, a small one late lets it near Nash)",
    )
    kl_coef: float = chz.field(
        default=0.0,
        doc="KL(policy || kl_reference) penalty at every trained token",
        validator=_non_negative,
    )
    kl_coef_final: float | None = chz.field(
        default=None,
        doc="if set, kl_coef moves linearly to this value over the run (e.g. 0 -> 0.1 with "
        "a forward KL to uniform: free to leave a plateau early, kept off the simplex "
        "corners late)",
    )
    kl_reference: str = chz.field(
        default="reference",
        doc="the KL's magnet: reference (the model before training) | uniform (over the "
        "legal moves; over the vocabulary for free text)",
        validator=_choice("reference", "uniform"),
    )
    kl_direction: str = chz.field(
        default="reverse",
        doc="reverse: KL(policy || magnet), magnetic mirror descent's | forward: "
        "KL(magnet || policy), whose pull does not fade where the policy is saturated",
        validator=_choice("reverse", "forward"),
    )
    merge_rows: bool = chz.field(
        default=True,
        doc="train identical (prompt, completion) rows once with summed advantages (exact)",
    )
    use_role_baseline: bool = chz.field(
        default=True, doc="RAE: subtract a per-(game, seat) EMA baseline"
    )
    role_baseline_ema_gamma: float = chz.field(default=0.95, doc="RAE EMA decay, 0 < x < 1")
    rae_baseline: str = chz.field(
        default="ema",
        doc="what RAE subtracts: ema (the original) | ema_debiased (bias-corrected start) | "
        "leave_one_out (mean of the other returns of the same game and seat in the batch)",
        validator=_choice("ema", "ema_debiased", "leave_one_out"),
    )
    prompt_baseline: bool = chz.field(
        default=False,
        doc="also subtract the mean advantage of the other turns with the same prompt "
        "(leave-one-out state baseline; unbiased, removes the situation's value)",
    )
    balanced_chance: bool = chz.field(
        default=False,
        doc="deal every chance outcome equally often across a batch where the game can "
        "list them (KuhnPokerSingle-v0: the 6 deals); unbiased, less card-luck variance",
    )
    gamma: float = chz.field(
        default=1.0, doc="discount across a seat's turns, 0 < gamma <= 1", validator=_unit
    )
    max_bad_steps: int = chz.field(
        default=3,
        doc="stop the run after this many consecutive steps whose loss or gradients were "
        "NaN/inf (each such update is skipped and reported as train/skipped_nonfinite)",
        validator=_positive,
    )
    weight_ema_decay: float = chz.field(
        default=0.0,
        doc="if > 0, also keep a bias-corrected moving average of the trained weights "
        "(Polyak averaging) with this decay, e.g. 0.95; evaluated beside the live weights "
        "(eval/<game>/averaged/...) and saved in every checkpoint as learner/averaged/. "
        "Self-play's last iterate cycles around an equilibrium; the average settles",
    )
    filter_zero_adv: bool = chz.field(default=False, doc="drop turns whose advantage is exactly 0")
    filter_draw: bool = chz.field(default=False, doc="re-play drawn games (up to max_draw_retries)")
    max_draw_retries: int = chz.field(
        default=5, doc="draw retries per game", validator=_non_negative
    )
    # ---- evaluation, checkpoints, logging -----------------------------------------
    eval_every: int = chz.field(
        default=16,
        doc="evaluate vs eval opponents every N steps; 0 = never",
        validator=_non_negative,
    )
    eval_games: int = chz.field(
        default=16, doc="eval games per (env, opponent, seat)", validator=_positive
    )
    eval_opponent_names: tuple[str, ...] = chz.field(default=("random",), doc="eval opponents")
    eval_env_ids: tuple[str, ...] = chz.field(default=(), doc="eval games; empty = env_ids")
    eval_exploitability: bool = chz.field(
        default=True,
        doc="also compute exact exploitability where the game allows (KuhnPokerSingle-v0)",
    )
    eval_temperature: float = chz.field(default=1.0, doc="sampling temperature in evaluation")
    save_every: int = chz.field(
        default=20,
        doc="checkpoint every N steps (and at the end); 0 = end only",
        validator=_non_negative,
    )
    log_path: str = chz.field(
        default="", doc="run folder; empty = runs/<auto name>; resumes if it exists"
    )
    load_checkpoint_path: str = chz.field(default="", doc="checkpoint folder to resume from")
    transcripts_per_step: int = chz.field(
        default=2, doc="game transcripts written per step", validator=_non_negative
    )
    wandb_project: str = chz.field(
        default="", doc="W&B project; empty = off (WANDB_MODE=offline works)"
    )
    wandb_name: str = chz.field(default="", doc="W&B run name; empty = the run folder name")
    tensorboard: bool = chz.field(default=False, doc="also write TensorBoard event files")
    seed: int = chz.field(default=0, doc="seed for games, sampling and initialisation")
    preset: str = chz.field(
        default="", doc="a named set of values applied before the explicit keys"
    )

    @property
    def num_steps(self) -> int:
        return (
            self.max_steps if self.max_steps > 0 else self.num_train_datapoints // self.batch_size
        )

    @property
    def games_per_step(self) -> int:
        return self.batch_size // 2

    def learning_rate_at(self, step: int) -> float:
        """The learning rate of `step` under `lr_schedule` (step 0 gets learning_rate)."""
        frac = step / self.num_steps if self.num_steps > 0 else 0.0
        if self.lr_schedule == "linear":
            return self.learning_rate * (1.0 - frac)
        if self.lr_schedule == "cosine":
            return self.learning_rate * 0.5 * (1.0 + math.cos(math.pi * frac))
        return self.learning_rate

    def entropy_coef_at(self, step: int) -> float:
        """The entropy coefficient of `step`: constant, or linear from entropy_coef at step 0
        to entropy_coef_final at the last step."""
        return self._linear(self.entropy_coef, self.entropy_coef_final, step)

    def kl_coef_at(self, step: int) -> float:
        """The KL coefficient of `step`, scheduled like entropy_coef_at."""
        return self._linear(self.kl_coef, self.kl_coef_final, step)

    def _linear(self, start: float, final: float | None, step: int) -> float:
        if final is None or self.num_steps <= 1:
            return start
        frac = min(1.0, step / (self.num_steps - 1))
        return start + frac * (final - start)

    def validate(self) -> TrainConfig:
        if self.batch_size % 2:
            raise ConfigError(
                f"batch_size must be even (two seats per game), got {self.batch_size}"
            )
        if not 0.0 < self.role_baseline_ema_gamma < 1.0:
            raise ConfigError("role_baseline_ema_gamma must be in (0, 1)")
        if not 0.0 <= self.weight_ema_decay < 1.0:
            raise ConfigError(
                f"weight_ema_decay must be in [0, 1) (0 = off, 0.95 is usual), got "
                f"{self.weight_ema_decay}"
            )
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.use_llm_obs_wrappers and len(self.use_llm_obs_wrappers) != len(self.env_ids):
            raise ConfigError(
                f"use_llm_obs_wrappers has {len(self.use_llm_obs_wrappers)} entries for "
                f"{len(self.env_ids)} env_ids; give one per env or none"
            )
        if not self.env_ids:
            raise ConfigError("env_ids is empty; e.g. env_ids=TicTacToe-v0,KuhnPoker-v1")
        for key in ("entropy_coef_final", "kl_coef_final"):
            value = getattr(self, key)
            if value is not None and value < 0:
                raise ConfigError(f"{key} must be >= 0, got {value}")
        return self

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in chz.asdict(self).items()}


def field_docs() -> list[tuple[str, str, str]]:
    """(name, default, doc) for every config field, for `--help`."""
    rows = []
    for name, field in chz.chz_fields(TrainConfig).items():
        default = field._default if field._default is not dataclasses.MISSING else ""
        rows.append(
            (
                name,
                json.dumps(default) if isinstance(default, tuple) else repr(default),
                field._doc or "",
            )
        )
    return rows


def help_text() -> str:
    lines = ["usage: spiral train key=value ...", "", "keys (default) description:"]
    lines += [f"  {name} ({default})  {doc}" for name, default, doc in field_docs()]
    lines += ["", f"presets: {', '.join(sorted(PRESETS))}"]
    return "\n".join(lines)


def parse_config(argv: Sequence[str]) -> TrainConfig:
    """Build a validated TrainConfig from `key=value` strings (preset first, then the rest)."""
    args = list(argv)
    bad = [a for a in args if "=" not in a]
    if bad:
        raise ConfigError(f"arguments must be key=value, got {bad}; see `spiral train --help`")
    # The last preset= wins, like any repeated key (so `make train TRAIN_ARGS=preset=...`
    # replaces the Makefile's preset).
    presets = [a.split("=", 1)[1] for a in args if a.startswith("preset=")]
    preset = presets[-1] if presets else ""
    if preset and preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; choose one of {', '.join(sorted(PRESETS))}")
    expanded = [f"{k}={v}" for k, v in PRESETS.get(preset, {}).items()] + args
    try:
        cfg = chz.Blueprint(TrainConfig).make_from_argv(expanded)
    except ConfigError:
        raise
    except Exception as err:  # chz raises several error types; re-raise as one clear error
        valid = ", ".join(name for name, _, _ in field_docs())
        raise ConfigError(f"{err}\nvalid keys: {valid}") from err
    return cfg.validate()
