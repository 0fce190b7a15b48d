"""Offline weight averaging of a finished Kuhn run: which `weight_ema_decay` to pick.

Reads every checkpoint of a run (made with save_every=2), folds the LoRA adapters into a
bias-corrected moving average with several decays (per checkpoint: d^2 for a per-step
decay d, as checkpoints are two steps apart), and computes the exact exploitability and
value against the Nash player of the live weights and of each average at every 10th step.
Writes one JSON row per evaluated step.

    python docs/results/kuhn-averaging/offline_average.py RUN_DIR OUT.jsonl [d1,d2,...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from peft import set_peft_model_state_dict
from safetensors.torch import load_file

from spiral.agents.llm_policy import LLMPolicy
from spiral.agents.model_agent import list_checkpoints
from spiral.engines.base import SamplingParams
from spiral.engines.torch.learner import TorchLearner
from spiral.engines.loading import ModelConfig
from spiral.evaluation.model_policy import model_kuhn_exploitability
from spiral.prompts.spec import PromptSpec


def main(run: Path, out: Path, decays: list[float]) -> None:
    config = json.loads((run / "config.json").read_text())
    learner = TorchLearner(ModelConfig(model="embedded", lora_rank=int(config["lora_rank"])))
    spec = PromptSpec(
        template=config["template"],
        answer_format=config["answer_format"],
        style=config["prompt_style"],
    )
    params = SamplingParams(max_tokens=int(config["max_tokens"]), temperature=1.0)

    def measure(weights: dict[str, torch.Tensor]) -> dict[str, float]:
        set_peft_model_state_dict(learner.model, weights)
        learner._epoch += 1
        report = model_kuhn_exploitability(LLMPolicy(learner.sampler(), spec, params))
        return {
            "exploitability": float(report["exploitability"]),
            "value_vs_nash": 0.5
            * (float(report["value_vs_nash_seat0"]) + float(report["value_vs_nash_seat1"])),
        }

    averages: dict[float, dict[str, torch.Tensor]] = {}
    count = 0
    with out.open("w") as f:
        for step, folder in list_checkpoints(run):
            weights = load_file(str(folder / "learner" / "adapter_model.safetensors"))
            count += 1
            for d in decays:
                per_ckpt = d**2
                w = (1 - per_ckpt) / (1 - per_ckpt**count)
                if d not in averages:
                    averages[d] = {k: v.clone() for k, v in weights.items()}
                else:
                    for k, v in averages[d].items():
                        v.lerp_(weights[k], w)
            if step % 10:
                continue
            row: dict[str, object] = {"step": step, "live": measure(weights)}
            for d in decays:
                row[f"ema{d}"] = measure(averages[d])
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    ds = [float(x) for x in (sys.argv[3] if len(sys.argv) > 3 else "0.8,0.9,0.95").split(",")]
    main(Path(sys.argv[1]), Path(sys.argv[2]), ds)
