"""What resume checks before it trusts a run folder.

- **Leftovers of killed writes** (`checkpoints/.tmp-*`) are removed at start: resume never
  reads them, and on a preemptible cluster they would slowly fill the disk.
- **The saved config is compared with the new one.** Keys that change the checkpoint's
  shape (model, LoRA rank/alpha: full vs LoRA) are refused always, since the weights
  cannot load. Keys that change the meaning of the run (games, batch, seed, loss,
  prompts, regularisers...) are refused when continuing a run folder: the metrics would
  silently mix two experiments. Keys that only extend or observe the run (`max_steps`,
  evaluation, logging, checkpoint cadence, device and memory knobs, `temperature`, which
  the learner follows on resume) may change. Starting a NEW run folder from a checkpoint
  (`load_checkpoint_path=` with a fresh `log_path=`) is fine-tuning, not resuming: only
  the shape keys must match.
- **Keys newer than the run folder** (a key added to Spiral after the run was saved) count
  as their default: the run trained with the behaviour the default names, so a folder
  from before the key resumes as long as the key is left at its default. This holds
  because a new key's default is always the behaviour from before the key (the rule for
  adding one: `lr_kl_target=0`, `fsdp=false`). Keys Spiral retired are ignored where the
  run used what remains or where they had no effect (`config.retired_option`); a run
  folder that used one is refused, though a new run may start from its checkpoints.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import chz

from spiral.algo import schedule
from spiral.args import flat_json
from spiral.checkpoints.manifest import DamagedCheckpointError
from spiral.engines.base import Learner
from spiral.train import legacy_keys
from spiral.train.checkpoint import LoopState, complete_checkpoints, verified_loop_state
from spiral.train.config import (
    EXACT_KEYS,
    RETIRED_HINT,
    RETIRED_KEYS,
    ConfigError,
    TrainConfig,
    retired_option,
)
from spiral.train.config_groups import AsyncConfig, PopulationConfig
from spiral.train.legacy_keys import cli_word

SHAPE_KEYS = ("model_name", "lora_rank", "lora_alpha")
SAFE_KEYS = frozenset(
    {
        "max_steps",
        "fsdp",  # how the ranks hold the model; the checkpoints are the same
        "num_train_datapoints",
        "eval_every",
        "eval_games",
        "eval_opponent_names",
        "eval_env_ids",
        "eval_exploitability",
        "eval_temperature",
        "save_every",
        "log_path",
        "load_checkpoint_path",
        "transcripts_per_step",
        "wandb_project",
        "wandb_name",
        "tensorboard",
        "device",
        "dtype",
        "micro_batch_tokens",
        "gradient_checkpointing",
        "prefix_cache_mb",
        "temperature",
        "recipe",
    }
)


def remove_partial_writes(ckpt_dir: Path) -> int:
    """Delete `.tmp-*` folders and files left by checkpoint writes that were killed."""
    removed = 0
    if not ckpt_dir.is_dir():
        return 0
    for leftover in ckpt_dir.glob(".tmp-*"):
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)
        removed += 1
    return removed


def named_checkpoints(named: str) -> tuple[list[Path], bool]:
    """The checkpoints `load_checkpoint_path=` names, newest first, and whether it named
    one checkpoint exactly. A run folder (or its `checkpoints/` folder) stands for its
    complete checkpoints, the newest intact one used, as `spiral eval checkpoint=RUN`
    takes it. A path that is none of these is one line saying what to pass; it is checked
    before the run folder is touched (`run.main`)."""
    path = Path(named).expanduser()
    what = "name a checkpoint (RUN/checkpoints/step_N) or a run folder (RUN)"
    if not path.exists():
        raise ConfigError(f"load_checkpoint_path={named} does not exist; {what}")
    if _is_checkpoint(path):
        return [path], True
    run = path.parent if path.name == "checkpoints" else path
    if (run / "checkpoints").is_dir():
        found = complete_checkpoints(run / "checkpoints")
        if not found:
            raise ConfigError(
                f"load_checkpoint_path={named} is a run folder that holds no complete "
                f"checkpoint yet; {what} with one, or leave load_checkpoint_path out to "
                "start from the model"
            )
        return found, False
    raise ConfigError(
        f"load_checkpoint_path={named} is neither a checkpoint (loop_state.json, learner/) "
        f"nor a run folder (checkpoints/); {what}"
    )


def _is_checkpoint(path: Path) -> bool:
    """A checkpoint folder, complete or not (its own check says which)."""
    return any((path / name).exists() for name in ("loop_state.json", "learner", "COMPLETE"))


def check_resume_config(saved: dict[str, Any], new: dict[str, Any], same_run: bool) -> None:
    """Raise ConfigError naming the first key whose change the resume cannot honour.
    A key missing from `saved` (added to Spiral after the run) counts as its default."""
    retired = retired_option(saved)
    saved = {k: v for k, v in saved.items() if k not in RETIRED_KEYS and k not in EXACT_KEYS}
    saved = _with_defaults(legacy_keys.fold(saved))
    if retired and same_run:
        raise ConfigError(
            f"cannot resume this run folder: it was trained with {retired}, an option this "
            f"version of Spiral no longer offers ({RETIRED_HINT}); continue it with the "
            "version that wrote it, or start a new run from its checkpoint "
            "(another log_path, load_checkpoint_path=<this checkpoint>)"
        )
    for key in SHAPE_KEYS:
        if key in saved and saved[key] != new.get(key):
            raise ConfigError(
                f"cannot resume: {key}={cli_word(new.get(key))} but the checkpoint was trained "
                f"with {key}={cli_word(saved[key])} (its weights have that shape); put {key} "
                "back, or start a new run with another log_path"
            )
    if not same_run:
        return
    changed = []
    for key in sorted(set(saved) | set(new)):
        if key in SAFE_KEYS or key in SHAPE_KEYS:
            continue
        was = saved.get(key)
        if isinstance(was, float) and not math.isfinite(was):
            raise ConfigError(
                f"cannot resume this run folder: it was trained with {key}={was}, a value "
                "Spiral now refuses (its weights are not finite either); start a new run "
                "with another log_path"
            )
        if was != new.get(key):
            changed.append(key)
    if changed:  # every changed key at once, so that the words given back are enough
        now = " ".join(f"{k}={cli_word(new.get(k))}" for k in changed)
        then = " ".join(f"{k}={cli_word(saved.get(k))}" for k in changed)
        raise ConfigError(
            f"cannot resume this run folder with {now}: it was trained with {then}, and "
            f"mixing both in one metrics.jsonl hides the change; pass {then} to continue, "
            "or start a new run (another log_path, optionally load_checkpoint_path=<this "
            "checkpoint>)"
        )


def stretched_schedules(saved: dict[str, Any], cfg: TrainConfig, step: int) -> str | None:
    """A notice when a resume changes the run's length under a schedule that spans the run
    (linear or cosine): from `step` on, it follows the new length. None otherwise."""
    length = ("max_steps", "num_train_datapoints", "batch_size")
    before = TrainConfig().to_json() | saved
    ran = chz.replace(cfg, **{k: int(before[k]) for k in length}).num_steps
    if ran == cfg.num_steps:
        return None
    spans = []
    for key, word in flat_json(cfg).items():
        if isinstance(word, str) and "->" in word:  # START->END or cosine:START->END
            value = schedule.parse(word)
            spans.append(f"{key} {value.at(step, ran):.3g} -> {value.at(step, cfg.num_steps):.3g}")
    if not spans:
        return None
    return (
        f"{ran} -> {cfg.num_steps} steps: the schedules that span the run follow the new "
        f"length from step {step} ({', '.join(spans)})"
    )


def _with_defaults(saved: dict[str, Any]) -> dict[str, Any]:
    """`saved` with every key it lacks at its default: the run's, and those of a mode it
    had on (a key added to Spiral after the run was saved)."""
    out = {**TrainConfig().to_json(), **saved}
    for group in (PopulationConfig, AsyncConfig):
        if out.get(group.SWITCH) is True:
            out = {**flat_json(group()), **out}
    return out


@dataclass
class Restored:
    folder: Path
    state: LoopState
    learner: Learner


def restore(
    cfg: TrainConfig,
    ckpt_dir: Path,
    make_learner: Callable[[], Learner],
    log: Callable[[str], None],
) -> Restored | None:
    """The newest intact checkpoint (of this run, or of the run `load_checkpoint_path=`
    names), or the one named, loaded into a new learner; None when there is nothing to
    resume. Raises ConfigError for a refused config change and DamagedCheckpointError
    when a checkpoint named exactly (or every one) is damaged."""
    named = False
    candidates = complete_checkpoints(ckpt_dir)
    if cfg.load_checkpoint_path:
        candidates, named = named_checkpoints(cfg.load_checkpoint_path)
    damaged: list[str] = []
    for folder in candidates:
        try:
            state = verified_loop_state(folder)
            same_run = folder.resolve().parent == ckpt_dir.resolve()
            check_resume_config(state.config, cfg.to_json(), same_run)
            learner = make_learner()
            learner.load(folder / "learner")
        except DamagedCheckpointError as err:
            if named:
                raise
            log(f"skipping damaged checkpoint: {err}")
            damaged.append(folder.name)
            continue
        if damaged:
            log(f"resuming from {folder.name}, the newest intact checkpoint")
        return Restored(folder, state, learner)
    if damaged:
        raise DamagedCheckpointError(
            f"every checkpoint in {candidates[0].parent} is damaged ({', '.join(damaged)}); "
            "move the folder aside to start over"
        )
    return None
