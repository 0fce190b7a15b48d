"""The groups of `spiral train`'s keys beyond the core: one typed sub-config each, with
its own checks (`validate`), nested in `TrainConfig` (train_config.py). Every key keeps its
flat name on the command line, in config.json and in the code (`fsp_pool_size=5` reaches
`cfg.population.fsp_pool_size`; `spiral.args` flattens the groups, refusing a name two
share). The two modes exist only when on (`population`: `fsp_enabled=true`; `actors`:
`use_async_actor_learner=true`); a mode's key without its switch is refused in one line,
beside its switch set to false it is dropped with a note, as the original ignored it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import chz

from spiral.agents.registry import known_opponents
from spiral.algo import schedule
from spiral.algo.names import KlReference, Rollout
from spiral.algo.schedule import Schedule
from spiral.args import UsageError, non_negative, positive, unit_interval, zero_or_unit_interval
from spiral.args import comma_list as game_id_list
from spiral.engines.registry import known_engine, known_sampler_engine
from spiral.games.registry import known_game_ids
from spiral.prompts.invalid import InvalidPolicyName

ConfigError = UsageError


def schedule_in(bounds: list[float], what: str) -> Callable[[Any, str], None]:
    """A validator: every value of a schedule field lies in [low, high)."""
    low, high = bounds

    def check(obj: Any, attr: str) -> None:
        value = getattr(obj, attr)
        if any(not low <= v < high for v in value.values):
            raise ConfigError(f"{attr.removeprefix('X_')} must stay in {what}, got {value}")

    return check


def non_negative_schedule(obj: Any, attr: str) -> None:
    value = getattr(obj, attr)
    if any(v < 0 for v in value.values):
        raise ConfigError(f"{attr.removeprefix('X_')} must stay >= 0, got {value}")


def positive_schedule(obj: Any, attr: str) -> None:
    """A learning rate: > 0 where it starts, never below 0 (a schedule may end at 0)."""
    value = getattr(obj, attr)
    if value.start <= 0 or any(v < 0 for v in value.values):
        raise ConfigError(f"{attr.removeprefix('X_')} must start > 0 and stay >= 0, got {value}")


@chz.chz
class PromptConfig:
    """Games and prompts, beyond the core."""

    use_llm_obs_wrappers: tuple[bool, ...] = chz.field(
        default=(),
        doc="per env: True = full message history, False = rules + latest state; empty = game default",
    )
    system_rules: bool = chz.field(default=False, doc="put the game rules in a system message")
    think_budget: int = chz.field(
        default=0,
        doc="constrained only: free reasoning tokens before the answer",
        validator=non_negative,
    )
    max_turns: int = chz.field(
        default=0,
        doc="turn limit per game (draw); 0 = each game's default",
        validator=non_negative,
    )
    invalid_move_policy: InvalidPolicyName = chz.field(
        default="spiral", doc="spiral (-1.5/+0.5, original) | strict (-1/+1) | loss (-1/0)"
    )
    top_p: float = chz.field(default=1.0, doc="nucleus sampling threshold")
    stop: tuple[str, ...] = chz.field(
        default=(),
        doc="stop strings, comma separated; stop=] ends a bracket reply at its first move",
    )

    def validate(self) -> None:
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")


@chz.chz
class LearningConfig:
    """Advantages and updates."""

    rollout: Rollout = chz.field(
        default="sampled",
        doc="where a step's rows come from: sampled (batch_size/2 games played, RAE "
        "advantages) | full_width (every deal and legal move expanded with its "
        "probability, each prompt trained once with each move's exact value: the exact "
        "expected update, no sampling noise; games that list their chance outcomes such "
        "as KuhnPokerSingle-v0 and LeducPoker-v0, answer_format=constrained)",
    )
    ppo_clip: float = chz.field(default=0.2, doc="PPO clip epsilon", validator=positive)
    num_substeps: int = chz.field(
        default=1,
        doc="optimizer steps per batch: the batch is shuffled and split into this many "
        "minibatches (tinker-cookbook's name); > 1 makes ppo's clipping active",
        validator=positive,
    )
    max_grad_norm: float = chz.field(default=1.0, doc="gradient clipping norm", validator=positive)
    lr_kl_target: float = chz.field(
        default=0.0,
        doc="a step whose rows' approx_kl (sampler vs learner: how far the weights moved "
        "since the rows were played) exceeds this gets learning rate x target / approx_kl; "
        "0 = off. With use_async_actor_learner=true it defaults to 0.05 (stale rows; the "
        "sync loop's fresh rows sit below ~0.02)",
        validator=non_negative,
    )
    use_role_baseline: bool = chz.field(
        default=True, doc="RAE: subtract a per-(game, seat) EMA baseline"
    )
    role_baseline_ema_gamma: float = chz.field(default=0.95, doc="RAE EMA decay, 0 < x < 1")
    gamma: float = chz.field(
        default=1.0, doc="discount across a seat's turns, 0 < gamma <= 1", validator=unit_interval
    )
    balanced_chance: bool = chz.field(
        default=False,
        doc="deal every chance outcome equally often across a batch where the game can "
        "list them (KuhnPokerSingle-v0: the 6 deals); unbiased, less card-luck variance",
    )
    filter_zero_adv: bool = chz.field(default=False, doc="drop turns whose advantage is exactly 0")
    private_centering: Schedule = chz.field(
        default=schedule.constant(0.0),
        blueprint_cast=schedule.parse,
        doc="in [0, 1): scale the policy gradient's part shared by the private informations "
        "of one public state (Kuhn's three cards at one betting history) by 1 - x, keeping "
        "what differs between them; a preconditioner for games with hidden information "
        "(spiral/algo/private_centering.py); 0 = off. A schedule moves it over the run "
        "(0.95->0.5: strong early to leave a card-blind plateau, weaker late)",
        validator=schedule_in([0.0, 1.0], "[0, 1) (0 = off)"),
    )
    filter_draw: bool = chz.field(default=False, doc="re-play drawn games (up to max_draw_retries)")
    max_draw_retries: int = chz.field(
        default=5, doc="draw retries per game", validator=non_negative
    )
    weight_ema_decay: float = chz.field(
        default=0.0,
        doc="if > 0, also keep a bias-corrected moving average of the trained weights "
        "(Polyak averaging) with this decay, e.g. 0.95; evaluated beside the live weights "
        "(eval/<game>/averaged/...) and saved in every checkpoint as learner/averaged/. "
        "Self-play's last iterate cycles around an equilibrium; the average settles",
    )
    max_bad_steps: int = chz.field(
        default=3,
        doc="stop the run after this many consecutive steps whose loss or gradients were "
        "NaN/inf (each such update is skipped and reported as train/skipped_nonfinite)",
        validator=positive,
    )

    def validate(self) -> None:
        if not 0.0 < self.role_baseline_ema_gamma < 1.0:
            raise ConfigError("role_baseline_ema_gamma must be in (0, 1)")
        if not 0.0 <= self.weight_ema_decay < 1.0:
            raise ConfigError(
                f"weight_ema_decay must be in [0, 1) (0 = off, 0.95 is usual), got "
                f"{self.weight_ema_decay}"
            )


@chz.chz
class RegularizerConfig:
    """An entropy bonus, a KL towards a magnet and a floor under each legal move
    (spiral/algo/regularizers.py)."""

    entropy_coef: Schedule = chz.field(
        default=schedule.constant(0.0),
        blueprint_cast=schedule.parse,
        doc="entropy bonus at every trained token (over the legal moves when answers are "
        "constrained); a schedule moves it over the run (0.3->0.1: a strong bonus early "
        "keeps the policy stochastic, a small one late lets it near Nash)",
        validator=non_negative_schedule,
    )
    kl_coef: Schedule = chz.field(
        default=schedule.constant(0.0),
        blueprint_cast=schedule.parse,
        doc="KL(policy || kl_reference) penalty at every trained token; a schedule moves it "
        "over the run (0->0.6: free to leave a plateau early, held near the magnet late)",
        validator=non_negative_schedule,
    )
    kl_reference: KlReference = chz.field(
        default="reference",
        doc="the KL's magnet: reference (the model before training) | uniform (over the "
        "legal moves; over the vocabulary for free text) | snapshot (a frozen copy of the "
        "policy, refreshed every kl_magnet_interval steps)",
    )
    kl_magnet_interval: int = chz.field(
        default=0,
        doc="kl_reference=snapshot: every this many steps (from step 0) the magnet becomes a "
        "frozen copy of the current policy (regularised Nash dynamics)",
        validator=non_negative,
    )
    kl_magnet_settle: float = chz.field(
        default=0.0,
        doc="kl_reference=snapshot: also refresh the magnet once the policy has settled on "
        "the regularised game's fixed point: the KL to the magnet's last change at most this "
        "times its largest change since the refresh (e.g. 0.1; the magnet at least 3 steps "
        "old); below 1; 0 = off; alone (kl_magnet_interval=0) the only rule",
        validator=non_negative,
    )

    move_floor: float = chz.field(
        default=0.0,
        doc="with answer_format=constrained: a floor under every legal next token's "
        "probability (e.g. 0.1), held by move_floor_coef x log(move_floor / p) for each one "
        "below it, a pull that does not vanish as p -> 0 as the entropy bonus's does; where "
        "moves part at one token (Kuhn, Leduc, TicTacToe) that is each move's probability; "
        "above 1/n it cannot be met where n tokens are legal and pulls towards uniform; below "
        "0.5; 0 = off (with move_floor_coef=0)",
        validator=non_negative,
    )
    move_floor_coef: float = chz.field(
        default=0.0,
        doc="weight of the move floor's penalty (e.g. 0.2); 0 = off (with move_floor=0)",
        validator=non_negative,
    )

    def validate(self) -> None:
        if self.move_floor >= 0.5:
            raise ConfigError(
                f"move_floor must be below 0.5 (no policy keeps two moves both at or above "
                f"0.5; e.g. 0.1), got {self.move_floor}"
            )
        if (self.move_floor > 0) != (self.move_floor_coef > 0):
            raise ConfigError(
                "the move floor needs both move_floor (a probability, e.g. 0.1) and "
                "move_floor_coef (its weight, e.g. 0.2) above 0, or both 0"
            )
        no_rule = self.kl_magnet_interval <= 0 and self.kl_magnet_settle <= 0
        if self.kl_reference == "snapshot" and no_rule:
            raise ConfigError(
                "kl_reference=snapshot needs a rule that moves the magnet: "
                "kl_magnet_interval > 0 (the steps between refreshes, e.g. 10) or "
                "kl_magnet_settle > 0 (once the policy settles, e.g. 0.02)"
            )
        moved = self.kl_magnet_interval > 0 or self.kl_magnet_settle > 0
        if moved and self.kl_reference != "snapshot":
            raise ConfigError(
                f"kl_magnet_interval and kl_magnet_settle move a snapshot magnet, and "
                f"kl_reference={self.kl_reference} does not move: set kl_reference=snapshot, "
                "or leave both at 0"
            )
        if self.kl_reference == "snapshot" and self.kl_coef.is_off:
            raise ConfigError(
                "kl_reference=snapshot with kl_coef=0 keeps a magnet that pulls nothing: "
                "set kl_coef (e.g. 0.2), or leave kl_reference at its default"
            )
        if self.kl_magnet_settle >= 1:
            raise ConfigError(
                f"kl_magnet_settle compares the KL's last change with its largest, below 1 "
                f"(e.g. 0.1), "
                f"got {self.kl_magnet_settle}"
            )


@chz.chz
class PopulationConfig:
    """Population play: fictitious self-play against a pool of past snapshots of the policy
    (LoRA: adapters over one model; full fine-tuning: weight files, see
    fsp_max_loaded_members). Exists when on: `fsp_enabled=true` creates it."""

    SWITCH: ClassVar[str] = "fsp_enabled"  # the key that creates this group

    fsp_pool_size: int = chz.field(default=25, doc="pool members kept (FIFO)", validator=positive)
    fsp_update_interval: int = chz.field(
        default=5,
        doc="the weights of every step i with i % this == 0 join the pool",
        validator=positive,
    )
    fsp_start_from: int = chz.field(
        default=0, doc="first step whose weights join the pool", validator=non_negative
    )
    fsp_include_current: bool = chz.field(
        default=True,
        doc="the current policy may be the opponent too (a plain self-play game)",
    )
    fsp_current_fraction: float | None = chz.field(
        default=None,
        doc="share of self-play games; None: the current policy is one more uniform "
        "choice beside the members (the original)",
    )
    fsp_max_loaded_members: int = chz.field(
        default=2,
        doc="full fine-tuning (lora_rank=0): pool members held in memory at once, each a "
        "copy of the model; the others wait on disk and are read when met (LRU)",
        validator=positive,
    )
    fsp_fixed_opponents: tuple[str, ...] = chz.field(
        default=(),
        doc="fixed pool members besides the snapshots: random, optimal, checkpoint:PATH, api:MODEL",
        validator=known_opponents,
    )

    def validate(self) -> None:
        if self.fsp_current_fraction is not None and not 0 <= self.fsp_current_fraction <= 1:
            raise ConfigError(
                f"fsp_current_fraction must be in [0, 1] (or None), got {self.fsp_current_fraction}"
            )


@chz.chz
class AsyncConfig:
    """The asynchronous actor-learner: actors (Ray) play games with the newest weights they
    have while the learner learns; needs the ray extra. Exists when on:
    `use_async_actor_learner=true` creates it; off, the sync loop plays, then learns."""

    SWITCH: ClassVar[str] = "use_async_actor_learner"  # the key that creates this group

    num_actors: int = chz.field(
        default=1, doc="Ray actors playing games, each with its own model copy", validator=positive
    )
    replay_buffer_max_staleness: int = chz.field(
        default=5,
        doc="games played by weights more than this many versions behind the learner are "
        "dropped, never trained on (the original's name and default)",
        validator=non_negative,
    )
    replay_buffer_size: int = chz.field(
        default=0,
        doc="games the replay buffer holds; 0 = one step's games, a lag of one version "
        "(actors get no work the buffer cannot hold; each further step's room adds a version)",
        validator=non_negative,
    )
    ray_address: str = chz.field(
        default="",
        doc="empty: start a local Ray instance; else the address of a running cluster to "
        "join (e.g. auto, or HOST:6379; actors then run on its nodes)",
    )
    actor_num_cpus: float = chz.field(
        default=1.0, doc="CPUs per actor (also its torch threads)", validator=positive
    )
    actor_num_gpus: float = chz.field(
        default=0.0, doc="GPUs per actor (fractions share one)", validator=non_negative
    )
    actor_timeout_s: float = chz.field(
        default=600.0,
        doc="an actor's batch of games taking longer than this is abandoned and the actor "
        "restarted (its games dropped)",
        validator=positive,
    )
    actor_max_restarts: int = chz.field(
        default=3,
        doc="times Ray restarts a dead actor; a run whose actors die more often stops",
        validator=non_negative,
    )


@chz.chz
class ComputeConfig:
    """Engines and performance."""

    engine: str = chz.field(
        default="torch",
        doc="the engine that learns and samples (spiral.engines.registry): torch "
        "(transformers + PEFT on CPU or CUDA) | tinker (the hosted Tinker API; TINKER_API_KEY)",
        validator=known_engine,
    )
    sampler_engine: str = chz.field(
        default="",
        doc="the engine that samples the learner's live weights; empty = the engine's own. "
        "vllm: one running vLLM engine, the LoRA adapter hot-swapped each step (the vllm "
        "extra; lora_rank > 0)",
        validator=known_sampler_engine,
    )
    vllm_kv_cache_gb: float = chz.field(
        default=1.0,
        doc="sampler_engine=vllm on a CPU: memory for vLLM's KV cache (GiB)",
        validator=positive,
    )
    vllm_gpu_memory: float = chz.field(
        default=0.0,
        doc="sampler_engine=vllm on a GPU: vLLM's share of the device (0 = what the learner "
        "leaves free at start, less its optimizer state; vLLM sleeps while it trains)",
        validator=zero_or_unit_interval,
    )
    vllm_max_model_len: int = chz.field(
        default=4096,
        doc="sampler_engine=vllm: longest prompt + completion (tokens)",
        validator=positive,
    )
    micro_batch_tokens: int = chz.field(
        default=0,
        doc="tokens per learner micro-batch (gradient accumulation); 0 = sized to the GPU's "
        "free memory at each step (spiral/engines/torch/memory.py), 4096 on a CPU",
        validator=non_negative,
    )
    gradient_checkpointing: bool = chz.field(
        default=False,
        doc="recompute each layer's activations in the backward pass (less memory, more "
        "compute); the learner then runs every row whole (no shared-prefix forward)",
    )
    fsdp: bool = chz.field(
        default=False,
        doc="under torchrun: shard the weights, gradients and optimizer state over the "
        "ranks (FSDP2) instead of keeping a whole copy on each; sampling gathers the whole "
        "weights (spiral/engines/torch/parallel/sharded.py)",
    )
    prefix_cache_mb: float = chz.field(
        default=1024.0,
        doc="the sampler's KV cache of earlier prompts, carried across the calls of one "
        "step (a game's rules and history computed once); 0 turns it off",
        validator=non_negative,
    )


@chz.chz
class EvalConfig:
    """Evaluation during training, beyond eval_every."""

    eval_games: int = chz.field(
        default=16, doc="eval games per (env, opponent, seat)", validator=positive
    )
    eval_opponent_names: tuple[str, ...] = chz.field(
        default=("random",),
        doc="eval opponents: random, optimal, checkpoint:PATH, api:MODEL",
        validator=known_opponents,
    )
    eval_env_ids: tuple[str, ...] = chz.field(
        default=(),
        doc="eval games; empty = env_ids",
        validator=known_game_ids,
        blueprint_cast=game_id_list,
    )
    eval_exploitability: bool = chz.field(
        default=True,
        doc="also compute exact exploitability where the game allows (KuhnPokerSingle-v0, "
        "LeducPoker-v0)",
    )
    eval_temperature: float = chz.field(
        default=1.0, doc="sampling temperature in evaluation, 0 for greedy", validator=non_negative
    )


@chz.chz
class LoggingConfig:
    """Transcripts and metric sinks."""

    transcripts_per_step: int = chz.field(
        default=2, doc="game transcripts written per step", validator=non_negative
    )
    wandb_project: str = chz.field(
        default="", doc="W&B project; empty = off (WANDB_MODE=offline works)"
    )
    wandb_name: str = chz.field(default="", doc="W&B run name; empty = the run folder name")
    tensorboard: bool = chz.field(default=False, doc="also write TensorBoard event files")
