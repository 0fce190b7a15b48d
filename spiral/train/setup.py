"""Turn a TrainConfig into the concrete pieces of a run: prompt spec, invalid-move
policy, per-game options, the learner, metrics sinks and the in-training evaluation.

Engines come from the engine registry (`spiral.engines.registry`), by the `engine` key.

`build_setup` checks first, in one line each and before any model is downloaded,
converted or loaded: the games and the evaluation opponents, the prompt choices and, in
`check_machine`, what the run needs from this machine (the device and dtype, a local
model folder that exists, the packages of the metrics sinks asked for).
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spiral import games
from spiral.agents import make as make_agent
from spiral.agents.llm_policy import LLMPolicy
from spiral.agents.scripted import optimal_problem
from spiral.analysis.exploitability import KUHN_CARDS, KUHN_GAME_ID
from spiral.analysis.leduc import LEDUC_GAME_ID
from spiral.engines.base import Learner, SamplingParams
from spiral.engines.torch.parallel.distributed import Ranks
from spiral.evaluation.match import evaluate, results_metrics
from spiral.evaluation.model_policy import model_kuhn_exploitability, model_leduc_exploitability
from spiral.prompts.invalid import InvalidMovePolicy, invalid_policy
from spiral.prompts.spec import PromptSpec
from spiral.report.sinks import MetricsSink, TensorBoardSink, WandbSink, missing_sink_package
from spiral.report.writable import check_run_files, check_utf8_name, check_writable_folder
from spiral.train.averaging import WeightAverage
from spiral.train.config import ConfigError, TrainConfig
from spiral.train.config_groups import PopulationConfig
from spiral.train.full_width import check_full_width
from spiral.train.population import Population
from spiral.train.run_lock import LOCK

# What a run writes in its folder, checked before any model work (`check_run_folder`).
RUN_FOLDERS = ("checkpoints", "transcripts")
RUN_FILES = (
    LOCK,
    "config.json",
    "console.log",
    "metrics.jsonl",
    "run_info.json",
    "league.json",
    "checkpoints/index.jsonl",
)


@dataclass(frozen=True)
class RunSetup:
    run_dir: Path
    prompt_spec: PromptSpec
    spec_by_game: dict[str, PromptSpec]
    invalid_policy: InvalidMovePolicy
    game_params: dict[str, dict[str, Any]]

    def policy(
        self,
        sampler: Any,
        params: SamplingParams,
        name: str,
        members: dict[str, str] | None = None,
    ) -> LLMPolicy:
        """The run's language-model agent over `sampler`: its prompt per game, `params`,
        and (population play) the members it answers for as one joint agent."""
        return LLMPolicy(
            sampler,
            self.prompt_spec,
            params,
            name=name,
            spec_by_game=self.spec_by_game,
            members=members,
        )


def default_run_name(cfg: TrainConfig) -> str:
    """Like the original: model short name, games, batch, lr, time."""
    model = Path(cfg.model_name.rstrip("/")).name or "model"
    envs = "+".join(e.rsplit("-v", 1)[0] for e in cfg.env_ids)
    return f"{model}-{envs}-{cfg.batch_size}batch-{cfg.learning_rate.start:g}lr-{time.strftime('%Y%m%d-%H%M%S')}"


def _check_free_form(cfg: TrainConfig, eval_games: tuple[str, ...]) -> None:
    """Games that take free-form moves (no move list) against what needs a list: a
    constrained answer, and the random opponent in evaluation or in the population."""
    played = tuple(dict.fromkeys((*cfg.env_ids, *eval_games)))
    problem = games.free_form_problem(played, cfg.answer_format, ())
    if problem:
        raise ConfigError(f"answer_format: {problem}")
    if cfg.eval_every > 0:
        problem = games.free_form_problem(eval_games, None, cfg.evaluation.eval_opponent_names)
        if problem:
            raise ConfigError(f"eval_opponent_names: {problem} (or eval_every=0)")
    fixed = cfg.population.fsp_fixed_opponents if cfg.population else ()
    problem = games.free_form_problem(cfg.env_ids, None, fixed)
    if problem:
        raise ConfigError(f"fsp_fixed_opponents: {problem}")


def build_setup(cfg: TrainConfig) -> RunSetup:
    """Validate everything that needs the registries, then build the run's pieces."""
    known = set(games.ids())
    for game_id in (*cfg.env_ids, *cfg.evaluation.eval_env_ids):
        if game_id not in known and ":" not in game_id:
            games.make(game_id)  # raises KeyError listing the known ids
    eval_games = cfg.evaluation.eval_env_ids or cfg.env_ids
    for name in cfg.evaluation.eval_opponent_names:
        problem = optimal_problem(name, eval_games)
        if problem:
            raise ConfigError(f"eval_opponent_names: {problem}")
    _check_free_form(cfg, eval_games)
    try:
        spec = PromptSpec(
            template=cfg.template,
            answer_format=cfg.answer_format,
            system_rules=cfg.prompts.system_rules,
            think_budget=cfg.prompts.think_budget,
            style=cfg.prompt_style,
        )
        policy = invalid_policy(cfg.prompts.invalid_move_policy)
    except (KeyError, ValueError) as err:
        raise ConfigError(str(err)) from err
    if cfg.learning.balanced_chance:
        for game_id in cfg.env_ids:
            if games.chance_outcomes(game_id) is None:
                warnings.warn(
                    f"balanced_chance: {game_id} cannot list its chance outcomes, so its "
                    "deals stay random (KuhnPokerSingle-v0 can)",
                    stacklevel=2,
                )
    game_params = {
        g: ({"max_turns": cfg.prompts.max_turns} if cfg.prompts.max_turns else {})
        for g in cfg.env_ids
    }
    # The original's per-env `use_llm_obs_wrappers`: True = full history, False = latest.
    spec_by_game = {
        game_id: dataclasses.replace(spec, obs_style="history" if full else "latest")
        for game_id, full in zip(cfg.env_ids, cfg.prompts.use_llm_obs_wrappers, strict=False)
    }
    check_machine(cfg)
    if cfg.learning.rollout == "full_width":
        check_full_width(cfg, game_params)
    run_dir = Path(cfg.log_path) if cfg.log_path else Path("runs") / default_run_name(cfg)
    return RunSetup(run_dir, spec, spec_by_game, policy, game_params)


def check_run_folder(run_dir: Path) -> None:
    """The run folder and what the run writes in it, checked before any model work
    (nothing is created): otherwise an unwritable folder, a folder where `metrics.jsonl`
    belongs or a link carrying a write out of the run stops it after the model loaded,
    or after its first step, with a traceback (`spiral.report.writable`)."""
    check_utf8_name(run_dir, "log_path", "the writers of its checkpoints (safetensors, tokenizers)")
    check_writable_folder(run_dir, "log_path")
    for name in RUN_FOLDERS:
        check_writable_folder(run_dir / name)
    check_run_files(run_dir, RUN_FILES)


def check_machine(cfg: TrainConfig) -> None:
    """What the run needs from this machine, checked before any model is loaded or
    converted: the device and dtype, a local model folder that exists, the packages of
    the metrics sinks asked for, and a cache that can take the embedded model's
    conversion."""
    from spiral.engines.embedded import EMBEDDED_NAMES, check_cache
    from spiral.engines.loading import resolve_device, resolve_dtype, resolve_model_path

    if cfg.compute.engine == "torch" or cfg.compute.sampler_engine:
        device = resolve_device(cfg.device)
        resolve_dtype(cfg.dtype, device, full_fine_tuning=cfg.lora_rank == 0)
    if cfg.model_name not in EMBEDDED_NAMES:
        resolve_model_path(cfg.model_name)  # a missing folder is refused here, not later
    if cfg.learning.weight_ema_decay > 0 and cfg.compute.engine != "torch":
        raise ConfigError(
            f"weight_ema_decay averages weights held here; engine={cfg.compute.engine} keeps "
            "them elsewhere: use engine=torch or weight_ema_decay=0"
        )
    reg = cfg.regularizer
    regularised = not (reg.entropy_coef.is_off and reg.kl_coef.is_off and reg.move_floor == 0)
    if regularised and cfg.compute.engine == "tinker":
        raise ConfigError(
            "entropy, KL and move-floor regularisers are computed by engine=torch; with "
            "engine=tinker set entropy_coef=0 kl_coef=0 move_floor=0 move_floor_coef=0"
        )
    if cfg.compute.engine == "tinker" and cfg.temperature != 1.0:
        raise ConfigError(
            "engine=tinker trains on the service's log-probs, which are at temperature 1: "
            "set temperature=1, or use engine=torch to train at another temperature"
        )
    problem = missing_sink_package(
        tensorboard=cfg.logging.tensorboard, wandb=bool(cfg.logging.wandb_project)
    )
    if problem:
        raise ConfigError(problem)
    if cfg.model_name in EMBEDDED_NAMES:
        check_cache()  # a cache that cannot take the conversion, before any model work


def make_learner_factory(
    cfg: TrainConfig, ranks: Ranks | None = None, sampling_only: bool = False
) -> Callable[[], Learner]:
    """Builds the run's learner from the engine registry; under torchrun (`ranks` of
    more than one process) wrapped to learn data-parallel (`fsdp`: sharded).
    `sampling_only`: a copy that only samples, for an async actor (the torch engine loads
    full fine-tuning's weights in the compute dtype, without fp32 masters)."""

    def build() -> Learner:
        from spiral.engines import registry
        from spiral.engines.loading import ModelConfig

        model_cfg = ModelConfig(
            model=cfg.model_name,
            lora_rank=cfg.lora_rank,
            lora_alpha=cfg.lora_alpha or None,
            device=cfg.device,
            dtype=cfg.dtype,
            gradient_checkpointing=cfg.compute.gradient_checkpointing,
            seed=cfg.seed,
        )
        learner = registry.learner(
            cfg.compute.engine,
            model_cfg,
            micro_batch_tokens=cfg.compute.micro_batch_tokens,
            max_grad_norm=cfg.learning.max_grad_norm,
            max_loaded_members=(cfg.population or PopulationConfig()).fsp_max_loaded_members,
            prefix_cache_mb=cfg.compute.prefix_cache_mb,
            trained=not sampling_only,
        )
        if cfg.compute.sampler_engine and cfg.compute.sampler_engine != cfg.compute.engine:
            learner = registry.sampled_by(
                cfg.compute.sampler_engine,
                learner,
                model_cfg,
                kv_cache_gb=cfg.compute.vllm_kv_cache_gb,
                max_model_len=cfg.compute.vllm_max_model_len,
                gpu_memory=cfg.compute.vllm_gpu_memory,
                # the policy, the KL's snapshot magnet and every pool member as adapters
                max_loras=2 + (cfg.population.fsp_pool_size if cfg.population else 0),
            )
        if ranks is not None and ranks.world > 1:
            from spiral.engines.torch.parallel import on_ranks

            learner = on_ranks(learner, fsdp=cfg.compute.fsdp)
        return learner

    return build


def build_sinks(cfg: TrainConfig, run_dir: Path) -> list[MetricsSink]:
    sinks: list[MetricsSink] = []
    if cfg.logging.wandb_project:
        sinks.append(
            WandbSink(
                cfg.logging.wandb_project,
                cfg.logging.wandb_name or run_dir.name,
                cfg.to_json(),
                str(run_dir),
            )
        )
    if cfg.logging.tensorboard:
        sinks.append(TensorBoardSink(run_dir / "tensorboard"))
    return sinks


def make_eval_fn(cfg: TrainConfig, setup: RunSetup) -> Callable[..., dict[str, float]]:
    """Evaluation vs `eval_opponent_names` on `eval_env_ids`, both seats, every call;
    with a population, also the exploitability of the pool's average policy (Kuhn)."""
    env_ids = cfg.evaluation.eval_env_ids or cfg.env_ids

    def run(
        learner: Learner,
        step: int,
        population: Population | None = None,
        average: WeightAverage | None = None,
    ) -> dict[str, float]:
        t0 = time.perf_counter()
        params = SamplingParams(
            max_tokens=cfg.max_tokens,
            temperature=cfg.evaluation.eval_temperature,
            top_p=cfg.prompts.top_p,
            stop=cfg.prompts.stop,
        )

        def policy() -> LLMPolicy:  # over the weights the learner holds right now
            return setup.policy(learner.sampler(), params, "policy")

        candidate = policy()
        metrics: dict[str, float] = {}
        for game_id in env_ids:
            opponents = {
                name: make_agent(name, game_id=game_id, seed=cfg.seed + 1)
                for name in cfg.evaluation.eval_opponent_names
            }
            results, _ = evaluate(
                candidate,
                opponents,
                [game_id],
                cfg.evaluation.eval_games,
                setup.invalid_policy,
                seed=cfg.seed + 10_000,
                game_params=setup.game_params.get(game_id, {}),
            )
            metrics.update(results_metrics(results))
        if cfg.evaluation.eval_exploitability and KUHN_GAME_ID in env_ids:
            metrics.update(kuhn_exploitability_metrics(candidate, cfg.temperature))
            if average is not None and average.count:
                with average.swapped_into(learner):
                    found = kuhn_exploitability_metrics(policy(), cfg.temperature)
                metrics.update(_averaged_keys(found))
            if population is not None and population.pool.members:

                def member(sampler: Any, name: str) -> LLMPolicy:
                    return setup.policy(sampler, params, name)

                metrics.update(population.average_metrics(learner, member))
        if cfg.evaluation.eval_exploitability and LEDUC_GAME_ID in env_ids:
            metrics.update(leduc_exploitability_metrics(candidate))
            if average is not None and average.count:
                with average.swapped_into(learner):
                    metrics.update(_averaged_keys(leduc_exploitability_metrics(policy())))
        metrics["time/eval"] = time.perf_counter() - t0
        return metrics

    return run


def _averaged_keys(metrics: dict[str, float]) -> dict[str, float]:
    """eval/<game>/<rest> -> eval/<game>/averaged/<rest>: the averaged weights' numbers."""
    out = {}
    for key, value in metrics.items():
        _, game, rest = key.split("/", 2)
        out[f"eval/{game}/averaged/{rest}"] = value
    return out


_EXPLOITABILITY_KEYS = ("exploitability", "nash_conv", "value_vs_nash_seat0", "value_vs_nash_seat1")
_LEDUC_KEYS = (
    "exploitability", "nash_conv", "br_value_seat0", "br_value_seat1",
    *(f"br_gain_seat{s}_round{r}" for s in (0, 1) for r in (1, 2)),
)  # fmt: skip


def leduc_exploitability_metrics(candidate: LLMPolicy) -> dict[str, float]:
    """Exact exploitability of the policy's Leduc strategy (temperature 1, from log-probs)
    as eval/ metrics, with each seat's best-response value and what a best responder
    gains in each seat and betting round;
    empty, with a warning, without the openspiel extra."""
    try:
        report = model_leduc_exploitability(candidate, 1.0)
    except ImportError as err:
        warnings.warn(f"skipping Leduc exploitability: {err}", stacklevel=2)
        return {}
    return {f"eval/{LEDUC_GAME_ID}/{key}_t1": float(report[key]) for key in _LEDUC_KEYS}


def kuhn_exploitability_metrics(
    candidate: LLMPolicy, rollout_temperature: float = 1.0
) -> dict[str, float]:
    """Exact exploitability of the policy's single-hand Kuhn strategy (from log-probs, no
    sampling noise) as eval/ metrics; empty, with a warning, without the openspiel extra.

    Keys say which distribution they measure: `..._t1` is the model's own distribution
    (temperature 1), with its strategy table as `p_bet_t1/<card><history>` (P(bet or
    call) at each of the 12 information states, e.g. `Jpb`); when the rollouts sample at
    another temperature, `..._rollout_t` is the policy as sampled there."""
    temperatures = {"t1": 1.0}
    if rollout_temperature > 0 and rollout_temperature != 1.0:
        temperatures["rollout_t"] = rollout_temperature
    prefix = f"eval/{KUHN_GAME_ID}"
    metrics: dict[str, float] = {}
    for suffix, temperature in temperatures.items():
        try:
            report = model_kuhn_exploitability(candidate, temperature)
        except ImportError as err:
            warnings.warn(f"skipping Kuhn exploitability: {err}", stacklevel=2)
            return {}
        for key in _EXPLOITABILITY_KEYS:
            metrics[f"{prefix}/{key}_{suffix}"] = float(report[key])
        if suffix == "t1":
            for info, dist in report["distributions"].items():
                name = KUHN_CARDS[int(info[0])] + info[1:]
                metrics[f"{prefix}/p_bet_t1/{name}"] = float(
                    dist.get("[bet]", 0.0) + dist.get("[call]", 0.0)
                )
    if "rollout_t" in temperatures:
        metrics[f"{prefix}/rollout_temperature"] = rollout_temperature
    return metrics
