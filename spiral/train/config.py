"""The training configuration: one frozen chz object, parsed from `key=value` pairs.

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

from spiral.agents.registry import known_opponents
from spiral.algo.names import BaselineKind, KlDirection, KlReference, LossName
from spiral.args import (
    UsageError,
    device_name,
    expand_preset,
    non_negative,
    parse_command,
    positive,
    unit_interval,
)
from spiral.args import field_docs as command_field_docs
from spiral.args import help_text as command_help
from spiral.engines.registry import known_engine, known_sampler_engine
from spiral.games.registry import known_game_ids
from spiral.prompts.invalid import InvalidPolicyName
from spiral.prompts.spec import AnswerFormat, PromptStyle, TemplateName
from spiral.train.presets import PRESETS
from spiral.types import DTypeName

LrSchedule = Literal["constant", "linear", "cosine", "step"]
LrStaleness = Literal["constant", "inverse"]


# One error type for a bad command line, whichever command (spiral.args).
ConfigError = UsageError


@chz.chz
class TrainConfig:
    """usage: spiral train key=value ...   (e.g. spiral train preset=embedded-kuhn seed=1)

    Self-play training. Keys follow the original SPIRAL Tinker port where it has them."""

    # ---- model and engine --------------------------------------------------------
    model_name: str = chz.field(
        default="embedded",
        doc="hub id (e.g. Qwen/Qwen3-4B-Base), local folder, or 'embedded' (SmolLM2-135M-Instruct)",
    )
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
        default=1.0, doc="sampler_engine=vllm: memory for vLLM's KV cache (GiB)", validator=positive
    )
    vllm_max_model_len: int = chz.field(
        default=4096,
        doc="sampler_engine=vllm: longest prompt + completion (tokens)",
        validator=positive,
    )
    lora_rank: int = chz.field(
        default=32, doc="LoRA rank; 0 = full fine-tuning", validator=non_negative
    )
    lora_alpha: int = chz.field(
        default=0, doc="LoRA alpha; 0 = 2 * lora_rank", validator=non_negative
    )
    device: str = chz.field(default="auto", doc="auto | cpu | cuda | cuda:N", validator=device_name)
    dtype: DTypeName = chz.field(
        default="auto",
        doc="auto (bf16 on CUDA, and for LoRA on CPUs with native bf16; else fp32) | "
        "float32 | bfloat16 | float16",
    )
    micro_batch_tokens: int = chz.field(
        default=4096,
        doc="tokens per learner micro-batch (gradient accumulation)",
        validator=positive,
    )
    max_grad_norm: float = chz.field(default=1.0, doc="gradient clipping norm", validator=positive)
    gradient_checkpointing: bool = chz.field(
        default=False,
        doc="recompute each layer's activations in the backward pass (less memory, more "
        "compute); the learner then runs every row whole (no shared-prefix forward)",
    )
    fsdp: bool = chz.field(
        default=False,
        doc="under torchrun: shard the weights, gradients and optimizer state over the "
        "ranks (FSDP2) instead of keeping a whole copy on each; sampling gathers the whole "
        "weights (spiral/engines/sharded.py)",
    )
    share_prefix: bool = chz.field(
        default=True,
        doc="run a prompt prefix that rows share once (the learner's micro-batches and "
        "the local sampler's calls): 2.2-3.7x faster learner steps on CPUs; off can be "
        "faster on a GPU at small batches, where kernel launches bound the step "
        "(docs/results.md, 'The torch engine on an H100')",
    )
    merge_lora_for_sampling: bool = chz.field(
        default=True,
        doc="the local sampler computes with the LoRA adapter merged into the base "
        "weights (one matrix product a layer instead of three; costs one copy of the "
        "adapted weights, two in population play); false: PEFT's adapter path",
    )
    packed_decode: bool = chz.field(
        default=True,
        doc="the local sampler decodes Llama-shaped models (llama, qwen2, qwen3) with its "
        "own step: projections concatenated and prepacked for oneDNN on CPUs, the KV "
        "cache written in place; the same logits as the model's forward (bit for bit in "
        "bf16 on CPUs), 1.4-1.8x faster decode at 16 rows here; answers under 16 tokens "
        "use it only once packed; false: the model's forward "
        "(spiral/engines/decode.py)",
    )
    prefix_cache_mb: float = chz.field(
        default=1024.0,
        doc="the sampler's KV cache of earlier prompts, carried across the calls of one "
        "step (a game's rules and history computed once); 0 turns it off",
        validator=non_negative,
    )
    # ---- games and prompts -------------------------------------------------------
    env_ids: tuple[str, ...] = chz.field(
        default=("TicTacToe-v0",), doc="games, comma separated", validator=known_game_ids
    )
    use_llm_obs_wrappers: tuple[bool, ...] = chz.field(
        default=(),
        doc="per env: True = full message history, False = rules + latest state; empty = game default",
    )
    template: TemplateName = chz.field(
        default="chat", doc="prompt template: chat | qwen3 | chatml | llama3 | plain"
    )
    answer_format: AnswerFormat = chz.field(
        default="bracket",
        doc="boxed (original \\boxed{}) | bracket (last bracketed legal move) | constrained",
    )
    system_rules: bool = chz.field(default=False, doc="put the game rules in a system message")
    prompt_style: PromptStyle = chz.field(
        default="original",
        doc="original (the game's observation + an example move, byte for byte) | focused "
        "(the situation and private information right before the answer, legal moves "
        "listed, no example)",
    )
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
    # ---- sampling ----------------------------------------------------------------
    max_tokens: int = chz.field(default=8192, doc="max new tokens per turn", validator=positive)
    temperature: float = chz.field(default=1.0, doc="sampling temperature", validator=positive)
    top_p: float = chz.field(default=1.0, doc="nucleus sampling threshold")
    stop: tuple[str, ...] = chz.field(
        default=(),
        doc="stop strings, comma separated; stop=] ends a bracket reply at its first move",
    )
    # ---- learning ----------------------------------------------------------------
    batch_size: int = chz.field(
        default=128,
        doc="seat-trajectories per step, two per game (128 = 64 games)",
        validator=positive,
    )
    num_train_datapoints: int = chz.field(
        default=51200,
        doc="total seat-trajectories; steps = this // batch_size",
        validator=positive,
    )
    max_steps: int = chz.field(
        default=0,
        doc="if > 0, overrides num_train_datapoints // batch_size",
        validator=non_negative,
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
    lr_staleness: LrStaleness = chz.field(
        default="constant",
        doc="async loop: constant | inverse (each step's learning rate times the mean of "
        "1 / max(1, staleness) over its trained tokens: rows two versions behind count half; "
        "staleness-aware async SGD, spiral/algo/staleness.py)",
    )
    lr_kl_target: float = chz.field(
        default=0.0,
        doc="a step whose rows' approx_kl (sampler vs learner: how far the weights moved "
        "since the rows were played) exceeds this gets learning rate x target / approx_kl; "
        "0 = off. For stale rows (async: 0.05 on the Kuhn preset); fresh rows sit below ~0.02",
        validator=non_negative,
    )
    loss_fn: LossName = chz.field(
        default="importance_sampling",
        doc="importance_sampling (unclipped, the original) | ppo (clipped) | "
        "truncated_importance_sampling (policy gradient x min(ratio, 2), for stale data)",
    )
    ppo_clip: float = chz.field(default=0.2, doc="PPO clip epsilon", validator=positive)
    num_substeps: int = chz.field(
        default=1,
        doc="optimizer steps per batch: the batch is shuffled and split into this many "
        "minibatches (tinker-cookbook's name); > 1 makes ppo's clipping active",
        validator=positive,
    )
    entropy_coef: float = chz.field(
        default=0.0,
        doc="entropy bonus at every trained token (over the legal moves when answers are "
        "constrained)",
        validator=non_negative,
    )
    entropy_coef_final: float | None = chz.field(
        default=None,
        doc="if set, entropy_coef moves linearly to this value over the run (a strong "
        "bonus early keeps the policy stochastic, a small one late lets it near Nash)",
    )
    kl_coef: float = chz.field(
        default=0.0,
        doc="KL(policy || kl_reference) penalty at every trained token",
        validator=non_negative,
    )
    kl_coef_final: float | None = chz.field(
        default=None,
        doc="if set, kl_coef moves linearly to this value over the run (e.g. 0 -> 0.1 with "
        "a forward KL to uniform: free to leave a plateau early, kept off the simplex "
        "corners late)",
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
    kl_direction: KlDirection = chz.field(
        default="reverse",
        doc="reverse: KL(policy || magnet), magnetic mirror descent's | forward: "
        "KL(magnet || policy), whose pull does not fade where the policy is saturated",
    )
    merge_rows: bool = chz.field(
        default=True,
        doc="train identical (prompt, completion) rows once with summed advantages (exact)",
    )
    use_role_baseline: bool = chz.field(
        default=True, doc="RAE: subtract a per-(game, seat) EMA baseline"
    )
    role_baseline_ema_gamma: float = chz.field(default=0.95, doc="RAE EMA decay, 0 < x < 1")
    rae_baseline: BaselineKind = chz.field(
        default="ema",
        doc="what RAE subtracts: ema (the original) | ema_debiased (bias-corrected start) | "
        "leave_one_out (mean of the other returns of the same game and seat in the batch)",
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
        default=1.0, doc="discount across a seat's turns, 0 < gamma <= 1", validator=unit_interval
    )
    max_bad_steps: int = chz.field(
        default=3,
        doc="stop the run after this many consecutive steps whose loss or gradients were "
        "NaN/inf (each such update is skipped and reported as train/skipped_nonfinite)",
        validator=positive,
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
        default=5, doc="draw retries per game", validator=non_negative
    )
    # ---- population play (fictitious self-play; spiral/train/population.py) ----------
    fsp_enabled: bool = chz.field(
        default=False,
        doc="play against a pool of past snapshots of the policy (LoRA: adapters over one "
        "model; full fine-tuning: weight files, see fsp_max_loaded_members)",
    )
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
    fsp_sampling: Literal["uniform", "prioritized"] = chz.field(
        default="uniform",
        doc="uniform over members (the original) | prioritized: (1 - p)^2 with p the "
        "current policy's league win rate against the member",
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
    # ---- the asynchronous actor-learner on Ray (spiral/train/async_collector.py) -----
    use_async_actor_learner: bool = chz.field(
        default=False,
        doc="actors (Ray) play games with the newest weights they have while the learner "
        "learns; needs the ray extra. Default: the sync loop (play, then learn)",
    )
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
    async_lockstep_steps: int = chz.field(
        default=0,
        doc="the first N steps train only on games the current weights played (actors and "
        "learner take turns, as in the sync loop): a policy moves most in its first steps, "
        "where a lag costs most; the lag replay_buffer_size allows starts after them",
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
    # ---- evaluation, checkpoints, logging -----------------------------------------
    eval_every: int = chz.field(
        default=16,
        doc="evaluate vs eval opponents every N steps; 0 = never",
        validator=non_negative,
    )
    eval_games: int = chz.field(
        default=16, doc="eval games per (env, opponent, seat)", validator=positive
    )
    eval_opponent_names: tuple[str, ...] = chz.field(
        default=("random",),
        doc="eval opponents: random, optimal, checkpoint:PATH, api:MODEL",
        validator=known_opponents,
    )
    eval_env_ids: tuple[str, ...] = chz.field(
        default=(), doc="eval games; empty = env_ids", validator=known_game_ids
    )
    eval_exploitability: bool = chz.field(
        default=True,
        doc="also compute exact exploitability where the game allows (KuhnPokerSingle-v0)",
    )
    eval_temperature: float = chz.field(default=1.0, doc="sampling temperature in evaluation")
    save_every: int = chz.field(
        default=20,
        doc="checkpoint every N steps (and at the end); 0 = end only",
        validator=non_negative,
    )
    log_path: str = chz.field(
        default="", doc="run folder; empty = runs/<auto name>; resumes if it exists"
    )
    load_checkpoint_path: str = chz.field(default="", doc="checkpoint folder to resume from")
    transcripts_per_step: int = chz.field(
        default=2, doc="game transcripts written per step", validator=non_negative
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
        if self.lr_schedule == "step" and step >= self.lr_step_at:
            return self.learning_rate * self.lr_step_factor
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
        if self.kl_reference == "snapshot" and self.kl_magnet_interval <= 0:
            raise ConfigError(
                "kl_reference=snapshot needs kl_magnet_interval > 0, the steps between "
                "refreshes of the magnet (e.g. kl_magnet_interval=10)"
            )
        if self.kl_reference == "snapshot" and self.lora_rank == 0:
            raise ConfigError(
                "kl_reference=snapshot keeps the magnet as a LoRA adapter; set lora_rank > 0"
            )
        if self.lr_schedule == "step" and self.lr_step_at <= 0:
            raise ConfigError(
                "lr_schedule=step needs lr_step_at > 0, the first step at the lower rate "
                "(e.g. lr_step_at=60 lr_step_factor=0.1)"
            )
        if self.lr_staleness != "constant" and not self.use_async_actor_learner:
            raise ConfigError(
                f"lr_staleness={self.lr_staleness} scales the step by the staleness of the "
                "async loop's games; the sync loop trains on games its current weights "
                "played: add use_async_actor_learner=true or drop lr_staleness"
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
        if self.fsp_current_fraction is not None and not 0 <= self.fsp_current_fraction <= 1:
            raise ConfigError(
                f"fsp_current_fraction must be in [0, 1] (or None), got {self.fsp_current_fraction}"
            )
        for key in ("entropy_coef_final", "kl_coef_final"):
            value = getattr(self, key)
            if value is not None and value < 0:
                raise ConfigError(f"{key} must be >= 0, got {value}")
        return self

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in chz.asdict(self).items()}


def field_docs() -> list[tuple[str, str, str]]:
    """(name, default, doc) for every config field, for `--help` and the docs."""
    return command_field_docs(TrainConfig)


def help_text(argv: Sequence[str] = ()) -> str:
    """`spiral train [preset=NAME key=value ...] --help`: every key, showing the values that
    the preset and the other keys given set in place of the defaults (the parser's own
    precedence: the preset first, the keys given over it)."""
    pairs = [(k, v) for k, sep, v in (w.partition("=") for w in argv) if sep]
    try:
        given = dict(expand_preset(pairs, PRESETS))
    except UsageError:
        given = dict(pairs)  # an unknown preset: parsing says so; help shows what it can
    epilog = f"presets: {', '.join(sorted(PRESETS))}"
    return command_help(TrainConfig, "train", epilog, given)


def parse_config(argv: Sequence[str]) -> TrainConfig:
    """A validated TrainConfig from `key=value` strings (`preset=NAME` first, then the
    rest; the shared front door, spiral.args.parse_command)."""
    return parse_command(TrainConfig, argv, "train", presets=PRESETS)
