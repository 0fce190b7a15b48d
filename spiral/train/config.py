"""The training configuration: a frozen chz object, parsed from `key=value` pairs.

The keys a run needs first sit on `TrainConfig` itself (the model, games, batch, steps,
learning rate, loss, LoRA, prompt, sampling, device, cadence, log path, seed: 25 of
them); everything else sits in a group, one typed sub-config each with its own checks
(`prompts`, `learning`, `regularizer`, `population`, `actors`, `compute`, `evaluation`,
`logging`). On the command line every key keeps its one flat name (`fsp_pool_size=5`,
the original's), unique across groups (`spiral.args` finds its group); `--help` lists the
core keys first, then each group under its name. `to_json` writes the same flat names, so
a run folder's config.json reads the same as before the groups.

Names and defaults follow the original SPIRAL Tinker port (`SpiralConfig`) where a field
exists there (`model_name`, `env_ids`, `batch_size`, `learning_rate`, `lora_rank`,
`max_tokens`, `loss_fn`, `role_baseline_ema_gamma`, `filter_draw`, `eval_every`,
`save_every`, `log_path`, `load_checkpoint_path`, ...). Fields the original lacks are ours.
`preset=NAME` expands to a set of values first; explicit keys override it.
Unknown keys and bad values raise `ConfigError` with the valid choices.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import chz

from spiral.algo.names import LossName
from spiral.args import (
    UsageError,
    device_name,
    expand_preset,
    flat_json,
    non_negative,
    parse_command,
    positive,
)
from spiral.args import field_docs as command_field_docs
from spiral.args import help_text as command_help
from spiral.games.registry import known_game_ids
from spiral.prompts.spec import AnswerFormat, PromptStyle, TemplateName
from spiral.train.config_groups import (
    AsyncConfig,
    ComputeConfig,
    EvalConfig,
    LearningConfig,
    LoggingConfig,
    PopulationConfig,
    PromptConfig,
    RegularizerConfig,
)
from spiral.train.presets import PRESETS, following_defaults
from spiral.types import DTypeName

LrSchedule = Literal["constant", "linear", "cosine", "step"]


# One error type for a bad command line, whichever command (spiral.args).
ConfigError = UsageError

# Keys Spiral no longer offers (docs/architecture.md, "Options retired"), with the value
# that is still what it does; a run folder saved with another value used the option.
RETIRED_KEYS: dict[str, Any] = {
    "lr_staleness": "constant",
    "async_lockstep_steps": 0,
    "kl_direction": "reverse",
    "prompt_baseline": False,
    "fsp_sampling": "uniform",
    "rae_baseline": "ema",
    "lr_warmup_steps": 0,
    "step_kl_max": 0.0,
}
RETIRED_VALUES: dict[str, tuple[Any, ...]] = {"loss_fn": ("truncated_importance_sampling",)}
# Exact shortcuts, always on now (SPIRAL_EXACT_SHORTCUTS=0 turns the engine's off).
EXACT_KEYS = ("merge_rows", "share_prefix", "merge_lora_for_sampling", "packed_decode")
RETIRED_HINT = (
    "retired: the option was measured not to help or never measured "
    '(docs/architecture.md, "Options retired")'
)


def retired_option(config: dict[str, Any]) -> str | None:
    """`key=value` of a retired option a saved config used (and that had an effect), or
    None. A KL direction without a KL, a baseline kind without a baseline, a pool choice
    without a pool, an async start without the async loop changed nothing."""
    idle = {
        "kl_direction": not config.get("kl_coef") and not config.get("kl_coef_final"),
        "rae_baseline": config.get("use_role_baseline") is False,
        "fsp_sampling": not config.get("fsp_enabled"),
        "async_lockstep_steps": not config.get("use_async_actor_learner"),
    }
    for key, kept in RETIRED_KEYS.items():
        if key in config and config[key] != kept and not idle.get(key, False):
            return f"{key}={config[key]}"
    for key, values in RETIRED_VALUES.items():
        if config.get(key) in values:
            return f"{key}={config[key]}"
    return None


@chz.chz
class TrainConfig:
    """usage: spiral train key=value ...   (e.g. spiral train preset=embedded-kuhn seed=1)

    Self-play training. Keys follow the original SPIRAL Tinker port where it has them."""

    model_name: str = chz.field(
        default="embedded",
        doc="hub id (e.g. Qwen/Qwen3-4B-Base), local folder, or 'embedded' (SmolLM2-135M-Instruct)",
    )
    env_ids: tuple[str, ...] = chz.field(
        default=("TicTacToe-v0",), doc="games, comma separated", validator=known_game_ids
    )
    batch_size: int = chz.field(
        default=128,
        doc="seat-trajectories per step, two per game (128 = 64 games)",
        validator=positive,
    )
    max_steps: int = chz.field(
        default=0,
        doc="if > 0, overrides num_train_datapoints // batch_size",
        validator=non_negative,
    )
    num_train_datapoints: int = chz.field(
        default=51200,
        doc="total seat-trajectories; steps = this // batch_size",
        validator=positive,
    )
    learning_rate: float = chz.field(default=1e-4, doc="Adam learning rate", validator=positive)
    lr_schedule: LrSchedule = chz.field(
        default="constant",
        doc="constant | linear (to 0 at the end) | cosine (to 0 at the end) | step "
        "(learning_rate until lr_step_at, then learning_rate * lr_step_factor)",
    )
    lr_step_at: int = chz.field(
        default=0,
        doc="lr_schedule=step: the first step at the lower rate (must be > 0 with step)",
        validator=non_negative,
    )
    lr_step_factor: float = chz.field(
        default=0.1,
        doc="lr_schedule=step: the lower rate as a fraction of learning_rate",
        validator=positive,
    )
    loss_fn: LossName = chz.field(
        default="importance_sampling",
        doc="importance_sampling (unclipped, the original) | ppo (clipped)",
    )
    lora_rank: int = chz.field(
        default=32, doc="LoRA rank; 0 = full fine-tuning", validator=non_negative
    )
    lora_alpha: int = chz.field(
        default=0, doc="LoRA alpha; 0 = 2 * lora_rank", validator=non_negative
    )
    template: TemplateName = chz.field(
        default="chat", doc="prompt template: chat | qwen3 | chatml | llama3 | plain"
    )
    answer_format: AnswerFormat = chz.field(
        default="bracket",
        doc="boxed (original \\boxed{}) | bracket (last bracketed legal move) | constrained",
    )
    prompt_style: PromptStyle = chz.field(
        default="original",
        doc="original (the game's observation + an example move, byte for byte) | focused "
        "(the situation and private information right before the answer, legal moves "
        "listed, no example) | brief (the game's rules in one sentence and the position, "
        "then the legal moves: the shortest prompt; TicTacToe and single-hand Kuhn, "
        "focused elsewhere)",
    )
    max_tokens: int = chz.field(default=8192, doc="max new tokens per turn", validator=positive)
    temperature: float = chz.field(default=1.0, doc="sampling temperature", validator=positive)
    device: str = chz.field(default="auto", doc="auto | cpu | cuda | cuda:N", validator=device_name)
    dtype: DTypeName = chz.field(
        default="auto",
        doc="compute dtype: auto (bf16 on CUDA, and for LoRA on CPUs with native bf16; "
        "else fp32) | float32 | bfloat16 | float16; what is trained stays fp32 (LoRA "
        "adapters; full fine-tuning's weights and optimizer state, under autocast)",
    )
    eval_every: int = chz.field(
        default=16,
        doc="evaluate vs eval opponents every N steps; 0 = never",
        validator=non_negative,
    )
    save_every: int = chz.field(
        default=20,
        doc="checkpoint every N steps (and at the end); 0 = end only",
        validator=non_negative,
    )
    log_path: str = chz.field(
        default="", doc="run folder; empty = runs/<auto name>; resumes if it exists"
    )
    load_checkpoint_path: str = chz.field(default="", doc="checkpoint folder to resume from")
    seed: int = chz.field(default=0, doc="seed for games, sampling and initialisation")
    preset: str = chz.field(
        default="", doc="a named set of values applied before the explicit keys"
    )
    # ---- groups (keys by their flat names on the command line) -------------------
    prompts: PromptConfig = chz.field(
        default_factory=PromptConfig, doc="games and prompts, beyond the core"
    )
    learning: LearningConfig = chz.field(
        default_factory=LearningConfig, doc="advantages and updates"
    )
    regularizer: RegularizerConfig = chz.field(
        default_factory=RegularizerConfig,
        doc="an entropy bonus and a KL towards a magnet (spiral/algo/regularizers.py)",
    )
    population: PopulationConfig = chz.field(
        default_factory=PopulationConfig,
        doc="population play: fictitious self-play against past snapshots (spiral/train/population.py)",
    )
    actors: AsyncConfig = chz.field(
        default_factory=AsyncConfig,
        doc="the asynchronous actor-learner on Ray (spiral/train/async_collector.py)",
    )
    compute: ComputeConfig = chz.field(default_factory=ComputeConfig, doc="engines and performance")
    evaluation: EvalConfig = chz.field(
        default_factory=EvalConfig, doc="evaluation during training, beyond eval_every"
    )
    logging: LoggingConfig = chz.field(
        default_factory=LoggingConfig, doc="transcripts and metric sinks"
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
        if self.lr_schedule == "step" and step >= self.lr_step_at:
            return self.learning_rate * self.lr_step_factor
        return self.learning_rate

    def entropy_coef_at(self, step: int) -> float:
        """The entropy coefficient of `step`: constant, or linear from entropy_coef at step 0
        to entropy_coef_final at the last step."""
        reg = self.regularizer
        return self._linear(reg.entropy_coef, reg.entropy_coef_final, step)

    def kl_coef_at(self, step: int) -> float:
        """The KL coefficient of `step`, scheduled like entropy_coef_at."""
        return self._linear(self.regularizer.kl_coef, self.regularizer.kl_coef_final, step)

    def private_centering_at(self, step: int) -> float:
        """The private-information centering of `step`, scheduled like entropy_coef_at."""
        learning = self.learning
        return self._linear(learning.private_centering, learning.private_centering_final, step)

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
        if not self.env_ids:
            raise ConfigError("env_ids is empty; e.g. env_ids=TicTacToe-v0,KuhnPoker-v1")
        if self.lr_schedule == "step" and self.lr_step_at <= 0:
            raise ConfigError(
                "lr_schedule=step needs lr_step_at > 0, the first step at the lower rate "
                "(e.g. lr_step_at=60 lr_step_factor=0.1)"
            )
        wrappers = self.prompts.use_llm_obs_wrappers
        if wrappers and len(wrappers) != len(self.env_ids):
            raise ConfigError(
                f"use_llm_obs_wrappers has {len(wrappers)} entries for "
                f"{len(self.env_ids)} env_ids; give one per env or none"
            )
        if self.regularizer.kl_reference == "snapshot" and self.lora_rank == 0:
            raise ConfigError(
                "kl_reference=snapshot keeps the magnet as a LoRA adapter; set lora_rank > 0"
            )
        for group in (self.prompts, self.learning, self.regularizer, self.population):
            group.validate()
        return self

    def to_json(self) -> dict[str, Any]:
        """Every key by its flat name (a run folder's config.json, a checkpoint's config)."""
        return flat_json(self)


def field_docs() -> list[tuple[str, str, str]]:
    """(name, default, doc) for every config field, for `--help` and the docs."""
    return command_field_docs(TrainConfig)


def help_text(argv: Sequence[str] = ()) -> str:
    """`spiral train [preset=NAME key=value ...] --help`: every key, showing the values that
    the preset and the other keys given set in place of the defaults (the parser's own
    precedence: the preset first, the keys given over it)."""
    pairs = [(k, v) for k, sep, v in (w.partition("=") for w in argv) if sep]
    try:
        given = dict([*expand_preset(pairs, PRESETS), *_following(pairs)])
    except UsageError:
        given = dict(pairs)  # an unknown preset: parsing says so; help shows what it can
    epilog = f"presets: {', '.join(sorted(PRESETS))}"
    return command_help(TrainConfig, "train", epilog, given)


def parse_config(argv: Sequence[str]) -> TrainConfig:
    """A validated TrainConfig from `key=value` strings (`preset=NAME` first, then the
    rest; the shared front door, spiral.args.parse_command). A retired key is named as
    retired, not as unknown."""
    for word in argv:
        key, _, value = word.partition("=")
        if key in RETIRED_KEYS or key in EXACT_KEYS or value in RETIRED_VALUES.get(key, ()):
            what = "always on now" if key in EXACT_KEYS else RETIRED_HINT
            raise ConfigError(f"{key}={value}: {what}; drop it")
    pairs = [(k, v) for k, sep, v in (w.partition("=") for w in argv) if sep]
    following = [f"{k}={v}" for k, v in _following(pairs)]
    return parse_command(TrainConfig, [*argv, *following], "train", presets=PRESETS)


def _following(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The defaults that other keys' values call for (`presets.FOLLOWING`), the preset
    expanded first; none for an unknown preset (parsing names it)."""
    try:
        return following_defaults(expand_preset(pairs, PRESETS))
    except UsageError:
        return []
