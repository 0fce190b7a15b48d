"""`spiral export checkpoint=PATH out=DIR`: a standalone merged model folder.

LoRA checkpoints are merged into their base model; the result loads with plain
`AutoModelForCausalLM.from_pretrained(out)` and any Hugging Face tool. `weights=averaged`
exports the run's averaged weights (`weight_ema_decay`) instead of the last iterate.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from spiral.args import parse_key_values
from spiral.train.checkpoint import CheckpointError, latest_checkpoint, load_loop_state

USAGE = (
    "usage: spiral export checkpoint=PATH (a checkpoint or run folder) out=DIR "
    "[weights=live|averaged]"
)
WEIGHTS = ("live", "averaged")


def resolve_checkpoint(path: Path) -> Path:
    """A checkpoint folder, or a run folder (its newest complete checkpoint)."""
    if (path / "checkpoints").is_dir():
        found = latest_checkpoint(path / "checkpoints")
        if found is None:
            raise CheckpointError(f"run folder {path} has no complete checkpoint yet")
        return found
    load_loop_state(path)  # validates: exists, complete, readable
    return path


def main(argv: Sequence[str]) -> int:
    args = parse_key_values(argv, ("checkpoint", "out", "weights"))
    if "checkpoint" not in args or "out" not in args:
        print(USAGE, file=sys.stderr)
        return 2
    weights = args.get("weights", "live")
    if weights not in WEIGHTS:
        print(
            f"spiral export: weights={weights!r}; choose one of {', '.join(WEIGHTS)}",
            file=sys.stderr,
        )
        return 2
    from spiral.engines.learner import TorchLearner
    from spiral.engines.loading import ModelConfig

    try:
        ckpt = resolve_checkpoint(Path(args["checkpoint"]))
    except CheckpointError as err:
        print(f"spiral export: {err}", file=sys.stderr)
        return 2
    config = load_loop_state(ckpt).config
    learner = TorchLearner(
        ModelConfig(
            model=config.get("model_name", "embedded"),
            lora_rank=int(config.get("lora_rank", 0)),
            lora_alpha=int(config.get("lora_alpha", 0)) or None,
            device="cpu",
        ),
        average_decay=float(config.get("weight_ema_decay", 0.0)),
    )
    learner.load(ckpt / "learner")
    if weights == "averaged":
        if not learner.has_average:
            print(
                f"spiral export: {ckpt} holds no averaged weights (the run had "
                "weight_ema_decay=0); export weights=live",
                file=sys.stderr,
            )
            return 2
        with learner.averaged():
            learner.export_merged(Path(args["out"]))
    else:
        learner.export_merged(Path(args["out"]))
    print(f"exported {ckpt} ({weights} weights) -> {args['out']}")
    return 0
