"""`spiral export checkpoint=PATH out=DIR`: a standalone merged model folder.

LoRA checkpoints are merged into their base model; the result loads with plain
`AutoModelForCausalLM.from_pretrained(out)` and any Hugging Face tool. `weights=averaged`
exports the run's averaged weights (`weight_ema_decay`) instead of the last iterate.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import chz

from spiral.agents.model_agent import RUN_FILE
from spiral.args import help_text, parse_command, wants_help
from spiral.train.averaging import AVERAGED, WeightAverage
from spiral.train.checkpoint import CheckpointError, latest_checkpoint, load_loop_state
from spiral.train.model_card import CARD, model_card


@chz.chz
class ExportArgs:
    """usage: spiral export checkpoint=PATH out=DIR [weights=live|averaged]

    A standalone merged model folder that loads with AutoModelForCausalLM.from_pretrained."""

    checkpoint: str = chz.field(doc="a checkpoint folder, or a run folder (its newest one)")
    out: str = chz.field(doc="the folder to write")
    weights: Literal["live", "averaged"] = chz.field(
        default="live", doc="live (the last iterate) or averaged (weight_ema_decay's average)"
    )


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
    if wants_help(argv):
        print(help_text(ExportArgs, "export"))
        return 0
    args = parse_command(ExportArgs, argv, "export")
    from spiral.engines.loading import ModelConfig
    from spiral.engines.torch.learner import TorchLearner

    ckpt = resolve_checkpoint(Path(args.checkpoint))
    state = load_loop_state(ckpt)
    config = state.config
    learner = TorchLearner(
        ModelConfig(
            model=config.get("model_name", "embedded"),
            lora_rank=int(config.get("lora_rank", 0)),
            lora_alpha=int(config.get("lora_alpha", 0)) or None,
            device="cpu",
        ),
    )
    learner.load(ckpt / "learner")
    out = Path(args.out)
    if args.weights == "averaged":
        # The decay matters only for folding in more steps, which export does not.
        decay = float(config.get("weight_ema_decay", 0.0)) or 0.5
        average = WeightAverage.load(ckpt / "learner" / AVERAGED, learner, decay)
        if average is None:
            raise CheckpointError(
                f"{ckpt} holds no averaged weights (the run had weight_ema_decay=0); "
                "export weights=live"
            )
        with average.swapped_into(learner):
            learner.export_merged(out)
    else:
        learner.export_merged(out)
    kind = "merged model" + (" (averaged weights)" if args.weights == "averaged" else "")
    (out / CARD).write_text(model_card(config, state.step, kind), encoding="utf-8")
    # The run's settings travel with the export: `spiral eval checkpoint=OUT` uses them.
    run = {"config": config, "step": state.step, "weights": args.weights}
    (out / RUN_FILE).write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
    print(f"exported {ckpt} ({args.weights} weights) -> {out}")
    return 0
