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
`recipe=NAME` (spiral/train/recipes/) applies a recipe first; explicit keys override it.
Unknown keys and bad values raise `ConfigError` with the valid choices.
"""

from __future__ import annotations

from typing import Any

import chz

from spiral.algo import schedule
from spiral.algo.names import LossName
from spiral.algo.schedule import Schedule
from spiral.args import (
    UsageError,
    comma_list,
    device_name,
    flat_json,
    non_negative,
    positive,
)
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
    positive_schedule,
)
from spiral.types import DTypeName

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
    "fsp_weighting": "uniform",
}
RETIRED_VALUES: dict[str, tuple[Any, ...]] = {"loss_fn": ("truncated_importance_sampling",)}
# Exact shortcuts, always on now (the torch engine's constructor flags turn them off).
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
        "fsp_weighting": not config.get("fsp_enabled"),
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
    """usage: spiral train key=value ...   (e.g. spiral train recipe=embedded-kuhn seed=1)

    Self-play training. Keys follow the original SPIRAL Tinker port where it has them."""

    model_name: str = chz.field(
        default="embedded",
        doc="hub id (e.g. Qwen/Qwen3-4B-Base), local folder, or 'embedded' (SmolLM2-135M-Instruct)",
    )
    env_ids: tuple[str, ...] = chz.field(
        default=("TicTacToe-v0",),
        doc="games, comma separated",
        validator=known_game_ids,
        blueprint_cast=comma_list,
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
    learning_rate: Schedule = chz.field(
        default=schedule.constant(1e-4),
        blueprint_cast=schedule.parse,
        doc="Adam learning rate: a number, or a schedule (1e-3*0.3@30: 1e-3, x0.3 from step "
        "30; 1e-3->0 linear; cosine:1e-3->1e-5)",
        validator=positive_schedule,
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
        "then the legal moves: the shortest prompt; TicTacToe, single-hand Kuhn and Leduc, "
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
    load_checkpoint_path: str = chz.field(
        default="",
        doc="checkpoint folder to start from (a run folder: its newest intact checkpoint)",
    )
    seed: int = chz.field(default=0, doc="seed for games, sampling and initialisation")
    recipe: str = chz.field(
        default="",
        doc="a recipe (spiral/train/recipes/) applied before the keys given; preset= is the "
        "older name",
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
        doc="an entropy bonus, a KL towards a magnet and a floor under every move "
        "(spiral/algo/regularizers.py)",
    )
    population: PopulationConfig | None = chz.field(
        default=None,
        doc="population play against past snapshots, when on (spiral/train/population.py)",
    )
    actors: AsyncConfig | None = chz.field(
        default=None,
        doc="the asynchronous actor-learner on Ray, when on (spiral/train/actors/collector.py)",
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

    def at(self, value: Schedule, step: int) -> float:
        """A scheduled value (`learning_rate`, `entropy_coef`, ...) at `step` of this run."""
        return value.at(step, self.num_steps)

    def validate(self) -> TrainConfig:
        if self.batch_size % 2:
            raise ConfigError(
                f"batch_size must be even (two seats per game), got {self.batch_size}"
            )
        if not self.env_ids:
            raise ConfigError("env_ids is empty; e.g. env_ids=TicTacToe-v0,KuhnPoker-v1")
        if self.num_steps <= 0:
            raise ConfigError(
                f"the run would have no steps: num_train_datapoints={self.num_train_datapoints} "
                f"is less than batch_size={self.batch_size}; raise it, or set max_steps"
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
        if self.regularizer.move_floor > 0 and self.answer_format != "constrained":
            raise ConfigError(
                "move_floor holds up the probabilities of legal moves, which only "
                "answer_format=constrained knows; set answer_format=constrained or move_floor=0"
            )
        if self.learning.rollout == "full_width":
            self._check_full_width()
        for group in (self.prompts, self.learning, self.regularizer, self.population):
            if group is not None:
                group.validate()
        return self

    def _check_full_width(self) -> None:
        """What `rollout=full_width` needs from the keys (the games: `train.full_width`)."""
        if self.compute.engine == "tinker":
            raise ConfigError(
                "rollout=full_width scores and trains on this machine's learner; "
                "engine=tinker takes sampled games: use rollout=sampled"
            )
        if self.answer_format != "constrained" or self.prompts.think_budget > 0:
            raise ConfigError(
                "rollout=full_width expands every legal move, so answers must be the moves "
                "themselves: set answer_format=constrained think_budget=0, or "
                "rollout=sampled"
            )
        if self.population is not None or self.actors is not None:
            raise ConfigError(
                "rollout=full_width plays the policy against itself exactly; population "
                "play and the async actors play sampled games: turn them off or use "
                "rollout=sampled"
            )
        if self.prompts.max_turns > 0 or self.prompts.top_p < 1:
            raise ConfigError(
                "rollout=full_width plays every game to its end with the policy's whole "
                "distribution: leave max_turns=0 and top_p=1, or rollout=sampled"
            )
        learning = self.learning
        if learning.num_substeps > 1 or learning.gamma < 1 or learning.filter_zero_adv:
            raise ConfigError(
                "rollout=full_width trains every prompt once with its moves' exact values: "
                "num_substeps=1, gamma=1 and filter_zero_adv=false (the keys that split or "
                "reshape sampled rows), or rollout=sampled"
            )

    def to_json(self) -> dict[str, Any]:
        """Every key by its flat name (a run folder's config.json, a checkpoint's config)."""
        return flat_json(self)
