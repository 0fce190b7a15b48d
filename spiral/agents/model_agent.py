"""Checkpoint agents: `checkpoint:PATH` -> an LLMPolicy over the saved weights.

`make_checkpoint_agent(arg, ...)` accepts, in this order:

- a run folder (it has `checkpoints/`): its newest complete checkpoint, by
  `checkpoints/index.jsonl`, else by scanning the `step_NNNNNN` folders;
- a checkpoint folder (`step_NNNNNN/` with `learner/`, `loop_state.json`, `COMPLETE`):
  the weights in `learner/` and the prompt choices of the run's config;
- a model folder (config.json: an export or any HF model; adapter_config.json: a PEFT
  adapter over its base); a checkpoint's `learner/` or `learner/averaged/` (the averaged
  weights of `weight_ema_decay`) is evaluated with that run's config, and an export with
  the config `spiral export` kept beside it (`spiral_run.json`);
- "base" / "embedded" / "" for the base model (`model_name=` picks it, default the
  embedded SmolLM2), or any other string as a hub id.

Choices:
- Checkpoint folders are read directly (index.jsonl, loop_state.json, COMPLETE), not via
  spiral.train, which sits above agents in the layer order.
- Weights are loaded for inference only, the way the run sampled them: in the run's
  dtype, a LoRA adapter on its base (the sampler merges it as the learner's sampler
  does), the model in eval mode, and a plain TorchSampler (version = the checkpoint's
  step) with no staleness check: nothing trains it.
- The prompt spec (template, answer format, system rules, think budget, prompt style,
  per-game observation style) and the sampling defaults (eval temperature, top_p,
  max_tokens, stop strings) come from the checkpoint's config, so a checkpoint is evaluated as it was trained; keyword
  params override any of them. A model folder or the base model uses PromptSpec defaults.
- The agent is named after what was loaded: "ckpt:step_000012", "model:<folder>",
  "base:<model name>".
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from spiral.agents.llm_policy import LLMPolicy
from spiral.checkpoints.manifest import in_checkpoints, verify_or_say
from spiral.engines.base import HOSTED_POINTER, SamplingParams
from spiral.errors import SpiralError
from spiral.prompts.spec import PromptSpec

COMPLETE = "COMPLETE"
RUN_FILE = "spiral_run.json"  # in an exported model folder: the run's config and step
BASE_NAMES = frozenset({"", "base", "embedded"})
DEFAULT_MAX_TOKENS = 256
# The run's config keys that make its prompt, and the PromptSpec field each one sets.
SPEC_KEYS = {
    "template": "template",
    "answer_format": "answer_format",
    "system_rules": "system_rules",
    "think_budget": "think_budget",
    "prompt_style": "style",
}


class CheckpointNotFound(SpiralError, FileNotFoundError):
    """A path that is neither a run, a checkpoint nor a model folder (says what to pass)."""


class DamagedCheckpoint(CheckpointNotFound):
    """A checkpoint whose files fail their manifest; `advice` says what to use instead."""

    def __init__(self, folder: Path, problems: list[str], advice: str = "use an earlier one"):
        super().__init__(f"checkpoint {folder} is damaged ({'; '.join(problems)}); {advice}")
        self.folder, self.problems = folder, problems


@dataclass(frozen=True)
class ModelSource:
    """What `arg` resolved to: where the weights are, the run config, and a display name."""

    model: str  # what load_model_and_tokenizer gets: a folder or a hub id / "embedded"
    name: str
    config: dict[str, Any] = field(default_factory=dict)
    checkpoint: Path | None = None
    step: int = 0


def _is_complete(folder: Path) -> bool:
    return (folder / COMPLETE).is_file() and (folder / "loop_state.json").is_file()


def latest_checkpoint(run_dir: Path) -> Path:
    """The newest complete checkpoint of a run folder (index first, then a folder scan)."""
    ckpt_dir = run_dir / "checkpoints"
    candidates = list_checkpoints(run_dir)
    if not candidates:
        raise CheckpointNotFound(
            f"run folder {run_dir} has no complete checkpoint in {ckpt_dir} yet; wait for the "
            "first save (save_every) or pass a checkpoint folder"
        )
    return candidates[-1][1]


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every complete checkpoint of a run folder, oldest first."""
    ckpt_dir = Path(run_dir) / "checkpoints"
    found: dict[int, Path] = {}
    index = ckpt_dir / "index.jsonl"
    if index.is_file():
        for line in index.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
                step, folder = int(row["step"]), ckpt_dir / str(row["path"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                continue  # a torn last line from a crash; the folder scan below still sees it
            if in_checkpoints(ckpt_dir, row["path"]) and _is_complete(folder):
                found[step] = folder
    for folder in ckpt_dir.glob("step_*"):
        digits = folder.name[len("step_") :]
        if digits.isdigit() and _is_complete(folder):
            found.setdefault(int(digits), folder)
    return sorted(found.items())


def _model_folder(learner_dir: Path) -> Path:
    """The HF/PEFT folder inside a checkpoint's learner/ (itself, or one level down), or
    the folder of a pointer to weights held by the Tinker service."""
    for folder in (learner_dir, *sorted(p for p in learner_dir.glob("*") if p.is_dir())):
        if (folder / "adapter_config.json").is_file() or (folder / "config.json").is_file():
            return folder
        if (folder / HOSTED_POINTER).is_file():
            return folder
    raise CheckpointNotFound(
        f"{learner_dir} holds no model (no adapter_config.json or config.json); the "
        "checkpoint is damaged, use an earlier one"
    )


def _checkpoint_source(folder: Path) -> ModelSource:
    if not (folder / COMPLETE).is_file():
        raise CheckpointNotFound(
            f"checkpoint {folder} is incomplete (no {COMPLETE} marker): it was being written "
            "when the run stopped; use an earlier one from checkpoints/index.jsonl"
        )
    try:
        state = json.loads((folder / "loop_state.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointNotFound(
            f"checkpoint {folder}: unreadable loop_state.json ({err})"
        ) from err
    problems = verify_or_say(folder)
    if problems:
        raise DamagedCheckpoint(folder, problems)
    config = dict(state.get("config") or {})
    step = int(state.get("step", 0))
    model = _model_folder(folder / "learner")
    return ModelSource(str(model), f"ckpt:{folder.name}", config, folder, step)


def _owning_checkpoint(model_dir: Path) -> Path | None:
    """The complete checkpoint whose `learner/` (or `learner/averaged/`) this is."""
    for learner in (model_dir, model_dir.parent):
        if learner.name == "learner" and _is_complete(learner.parent):
            return learner.parent
    return None


def _exported_run(model_dir: Path) -> tuple[dict[str, Any], int]:
    """The run config and step `spiral export` left in a model folder ({} and 0 if none)."""
    try:
        found = json.loads((model_dir / RUN_FILE).read_text(encoding="utf-8"))
        return dict(found["config"]), int(found["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return {}, 0


def checkpoint_config(run_dir: Path) -> dict[str, Any]:
    """The config of a run folder's newest complete checkpoint ({} without one)."""
    found = list_checkpoints(run_dir)
    return _checkpoint_source(found[-1][1]).config if found else {}


def resolve_source(arg: str, model_name: str = "") -> ModelSource:
    """Work out what `arg` names (see the module docstring); nothing is loaded yet."""
    if arg in BASE_NAMES:
        base = model_name or "embedded"
        return ModelSource(base, f"base:{Path(base).name or base}")
    path = Path(arg).expanduser()
    if path.is_dir():
        is_run = any((path / n).exists() for n in ("checkpoints", "metrics.jsonl", "run_info.json"))
        if is_run:  # a run folder (its config.json is the run's, not a model's)
            return _checkpoint_source(latest_checkpoint(path))
        if (path / "learner").is_dir() or (path / "loop_state.json").is_file():
            return _checkpoint_source(path)
        if (path / "config.json").is_file() or (path / "adapter_config.json").is_file():
            owner = _owning_checkpoint(path)
            if owner is not None:  # learner/ or learner/averaged/: the run's config applies
                found = _checkpoint_source(owner)
                name = found.name if path.name == "learner" else f"{found.name}/{path.name}"
                return ModelSource(str(path), name, found.config, found.checkpoint, found.step)
            config, step = _exported_run(path)
            return ModelSource(str(path), f"model:{path.name}", config, step=step)
        raise CheckpointNotFound(
            f"{path} is a folder but not a run (checkpoints/), a checkpoint (learner/, "
            "loop_state.json) or a model folder (config.json / adapter_config.json)"
        )
    if arg.startswith((".", "/", "~")) or path.exists():
        raise CheckpointNotFound(f"checkpoint path {arg} does not exist")
    return ModelSource(arg, f"base:{arg}")  # a hub id


def inherited_dtype(run_dtype: str, device: str) -> str:
    """The run's dtype, or float32 (said in one line) where this machine is a CPU that
    would emulate it: a checkpoint trained in bf16 elsewhere still plays here, at fp32
    speed, instead of being refused for a dtype the command cannot change."""
    if run_dtype not in ("bfloat16", "float16"):
        return run_dtype
    import torch

    from spiral.engines.loading import resolve_device
    from spiral.engines.torch import cpu

    if resolve_device(device).type != "cpu" or not cpu.emulated(getattr(torch, run_dtype)):
        return run_dtype
    print(
        f"the run computed in {run_dtype}, which this CPU would emulate ~100x slower: "
        "loading it in float32",
        file=sys.stderr,
    )
    return "float32"


def load_sampler(
    source: ModelSource, device: str = "auto", dtype: str = "", engine: str = "torch"
) -> Any:
    """A sampler of `engine` (the engine registry) over the source's weights, in eval
    mode, computing as the run's own sampler did: in the run's dtype (`dtype` empty: the
    run's, else auto), a LoRA adapter kept as an adapter on its base (the sampler merges
    it the way the learner's does), so a checkpoint scores its moves as it did in
    training."""
    from spiral.engines import registry
    from spiral.engines.loading import ModelConfig

    if (Path(source.model) / HOSTED_POINTER).is_file() and engine != "tinker":
        raise CheckpointNotFound(
            f"{source.name} was trained with engine=tinker and its weights are on the Tinker "
            "service: add engine=tinker (with TINKER_API_KEY set)"
        )
    is_adapter = (Path(source.model) / "adapter_config.json").is_file()
    cfg = ModelConfig(
        model=source.model,
        lora_rank=max(1, int(source.config.get("lora_rank") or 1)) if is_adapter else 0,
        device=device,
        dtype=dtype or inherited_dtype(str(source.config.get("dtype") or "auto"), device),
    )
    return registry.sampler(engine, cfg, version=source.step)


def prompt_specs(
    config: dict[str, Any], overrides: dict[str, Any]
) -> tuple[PromptSpec, dict[str, PromptSpec]]:
    """The run's prompt spec and per-game observation styles, with `overrides` applied."""
    values = {field: config[key] for key, field in SPEC_KEYS.items() if key in config}
    values.update({field: overrides[key] for key, field in SPEC_KEYS.items() if key in overrides})
    if "obs_style" in overrides:
        values["obs_style"] = overrides["obs_style"]
    spec = PromptSpec(**values)
    by_game: dict[str, PromptSpec] = {}
    if "obs_style" not in overrides:
        envs = config.get("env_ids") or []
        wrappers = config.get("use_llm_obs_wrappers") or []
        for game_id, full in zip(envs, wrappers, strict=False):
            by_game[game_id] = replace(spec, obs_style="history" if full else "latest")
    return spec, by_game


def sampling_params(config: dict[str, Any], overrides: dict[str, Any]) -> SamplingParams:
    """Eval sampling: the run's eval temperature, top_p, max_tokens and stop strings
    unless overridden."""
    return SamplingParams(
        stop=tuple(overrides.get("stop", config.get("stop") or ())),
        max_tokens=int(overrides.get("max_tokens", config.get("max_tokens", DEFAULT_MAX_TOKENS))),
        temperature=float(
            overrides.get(
                "temperature", config.get("eval_temperature", config.get("temperature", 1.0))
            )
        ),
        top_p=float(overrides.get("top_p", config.get("top_p", 1.0))),
    )


class CheckpointPolicy(LLMPolicy):
    """An LLMPolicy that remembers what it was loaded from (step, folder, run config)."""

    def __init__(self, source: ModelSource, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.source = source


_KNOWN_PARAMS = frozenset(
    {
        *SPEC_KEYS,
        "obs_style",
        "stop",
        "temperature",
        "max_tokens",
        "top_p",
        "model_name",
        "device",
        "dtype",
        "engine",
        "name",
    }
)


def make_checkpoint_agent(
    arg: str, game_id: str = "", seed: int = 0, **params: Any
) -> CheckpointPolicy:
    """Factory for the `checkpoint:PATH` spec: an LLMPolicy over the saved weights.

    params: template, answer_format, system_rules, think_budget, prompt_style, obs_style,
    temperature, max_tokens, top_p, stop (override the checkpoint's config), model_name (for "base"),
    device, dtype, engine (a registered engine; default the run's, else torch), name. `game_id` is
    unused: one policy plays every game.
    """
    unknown = set(params) - _KNOWN_PARAMS
    if unknown:
        raise TypeError(
            f"checkpoint agent: unknown params {sorted(unknown)}; valid: {sorted(_KNOWN_PARAMS)}"
        )
    source = resolve_source(arg, str(params.get("model_name", "")))
    spec, by_game = prompt_specs(source.config, params)
    sampler = load_sampler(
        source,
        str(params.get("device", "auto")),
        str(params.get("dtype", "")),
        # the engine the run trained with where none is given (a Tinker run's weights are
        # on the service)
        str(params.get("engine") or source.config.get("engine") or "torch"),
    )
    name = str(params.get("name") or source.name)
    params_ = sampling_params(source.config, params)
    return CheckpointPolicy(
        source, sampler, spec, params_, name=name, seed=seed, spec_by_game=by_game
    )
