"""Spiral vs TRL's GRPOTrainer on one workload: one RL step each, the same model, prompts,
samples and tokens, in one process on this machine.

Workload: `prompts` TicTacToe positions (a few random moves in, both seats), rendered
by Spiral's prompt builder (chat template, bracketed answer) so both sides get the same
token ids; `generations` samples per prompt of at most `max_tokens` tokens at
temperature 1; reward 1 when the answer parses to a legal move, else 0; advantage =
reward minus its prompt group's mean (Dr. GRPO style: `scale_rewards="none"` in TRL);
LoRA r16 on all linear layers; AdamW, lr 1e-5; one optimizer step.

Each side runs a warm-up step on its own positions, then a timed step on another set
(the same positions for both sides). Timed: sampling + reward + forward/backward +
optimizer step, as the user's loop would run it. TRL runs twice: with its own defaults
(`bf16=True` autocast and gradient checkpointing on, as `GRPOConfig` sets them) and
matched to Spiral (the model loaded in the same dtype, no autocast, no checkpointing).

TRL is an extra of this benchmark, not of the package:
    make bench-trl        # installs benchmarks/requirements-trl.txt, runs this script
    python benchmarks/trl_side_by_side.py --dtype bfloat16 --json out.json

A benchmark, not a test: numbers depend on the machine and its load; compare the rows
of one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from typing import Any

import torch
from transformers import TrainerCallback

from spiral.agents.llm_policy import LLMPolicy
from spiral.algo.assemble import turn_to_datum
from spiral.algo.losses import importance_sampling_loss
from spiral.engines.base import SamplingParams
from spiral.engines.loading import ModelConfig, resolve_dtype, resolve_model_path
from spiral.engines.torch.learner import TorchLearner
from spiral.games.base import State
from spiral.games.registry import make
from spiral.prompts.parse import parse_move
from spiral.prompts.render import build_prompt, encode
from spiral.prompts.spec import PromptSpec

SPEC = PromptSpec(template="chat", answer_format="bracket")
LORA_RANK = 16
LEARNING_RATE = 1e-5


def positions(count: int, seed: int) -> list[State]:
    """`count` non-terminal TicTacToe positions, 0-4 random moves in."""
    rng = random.Random(seed)
    states: list[State] = []
    while len(states) < count:
        state = make("TicTacToe-v0", seed=rng.randrange(1 << 30))
        for _ in range(rng.randrange(5)):
            state.apply_action(rng.choice(state.legal_actions()))
        if not state.is_terminal():
            states.append(state)
    return states


def legal(text: str, state: State) -> float:
    return 1.0 if parse_move(text, state, SPEC).ok else 0.0


# ---- Spiral ---------------------------------------------------------------------------
def spiral_step(
    learner: TorchLearner, states: list[State], generations: int, max_tokens: int
) -> dict[str, float]:
    """One RL step through Spiral's own parts: prompts and parsing (LLMPolicy), the
    sampler (identical prompts prefilled once), turn_to_datum, forward_backward, optim_step."""
    start = time.perf_counter()
    params = SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=0)
    policy = LLMPolicy(learner.sampler(), SPEC, params)
    repeated = [s for s in states for _ in range(generations)]
    turns = policy.take_turns(repeated, seed=0)
    rewards = [1.0 if t.parse.ok else 0.0 for t in turns]
    datums = []
    for g in range(len(states)):
        group = range(g * generations, (g + 1) * generations)
        mean = sum(rewards[i] for i in group) / generations
        datums += [turn_to_datum(turns[i], rewards[i] - mean) for i in group]
    sampled = time.perf_counter()
    learner.forward_backward(datums, importance_sampling_loss)
    learner.optim_step(LEARNING_RATE)
    done = time.perf_counter()
    generated = sum(len(t.completion.tokens) for t in turns)
    return {
        "seconds": done - start,
        "sample_s": sampled - start,
        "learn_s": done - sampled,
        "generated_tokens": float(generated),
        "trained_tokens": float(sum(len(d.input_ids) for d in datums)),
        "legal_rate": sum(rewards) / len(rewards),
    }


# ---- TRL ------------------------------------------------------------------------------
class _StepTimer(TrainerCallback):
    """Times each optimizer step of a transformers Trainer."""

    def __init__(self) -> None:
        self.begins: list[float] = []
        self.seconds: list[float] = []

    def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
        self.begins.append(time.perf_counter())

    def on_step_end(self, *args: Any, **kwargs: Any) -> None:
        self.seconds.append(time.perf_counter() - self.begins[-1])


def trl_steps(
    model_path: str,
    dtype: torch.dtype,
    states: list[State],
    generations: int,
    max_tokens: int,
    defaults: bool,
    out_dir: str,
) -> dict[str, float]:
    """Two GRPOTrainer steps (warm-up, timed) over `states` (the first half is the warm-up
    step's prompts); prompts are the same token ids Spiral samples from."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    load_dtype = torch.float32 if defaults else dtype
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=load_dtype)
    texts = [build_prompt(s, s.current_player(), SPEC, tokenizer) for s in states]
    dataset = Dataset.from_dict({"prompt": texts, "position": list(range(len(states)))})
    counts: list[dict[str, float]] = []

    def reward(completions: list[str], position: list[int], **kwargs: Any) -> list[float]:
        values = [legal(text, states[p]) for text, p in zip(completions, position, strict=True)]
        ids = kwargs.get("completion_ids") or []
        counts.append({"generated": float(sum(len(c) for c in ids)), "legal": sum(values)})
        return values

    half = len(states) // 2
    config = GRPOConfig(
        output_dir=out_dir,
        max_steps=2,
        # One optimizer step over the `half` positions' samples, in micro-batches of one
        # position's generations (whole-batch logits over a 49k vocab ran this 24 GiB
        # machine out of memory); generation still covers the whole step at once.
        per_device_train_batch_size=generations,
        gradient_accumulation_steps=half,
        num_generations=generations,
        max_completion_length=max_tokens,
        temperature=1.0,
        top_p=1.0,
        learning_rate=LEARNING_RATE,
        lr_scheduler_type="constant",
        beta=0.0,
        scale_rewards="none",
        shuffle_dataset=False,
        use_cpu=True,
        bf16=defaults,
        gradient_checkpointing=defaults,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    peft = LoraConfig(
        r=LORA_RANK, lora_alpha=2 * LORA_RANK, target_modules="all-linear", task_type="CAUSAL_LM"
    )
    timer = _StepTimer()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft,
        callbacks=[timer],
    )
    trainer.train()
    last = counts[-1]
    prompt_tokens = [len(encode(t, tokenizer)) for t in texts]
    trained = sum(prompt_tokens[half:]) * generations + last["generated"]
    return {
        "seconds": timer.seconds[-1],
        "generated_tokens": last["generated"],
        "trained_tokens": float(trained),
        "legal_rate": last["legal"] / (half * generations),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16")
    parser.add_argument("--prompts", type=int, default=8, help="positions per step")
    parser.add_argument("--generations", type=int, default=8, help="samples per position")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    path = resolve_model_path(args.model)
    dtype = resolve_dtype(args.dtype, torch.device("cpu"))
    dtype_name = str(dtype).removeprefix("torch.")
    warm, timed = positions(args.prompts, seed=1), positions(args.prompts, seed=2)
    rows: dict[str, dict[str, float]] = {}

    torch.manual_seed(0)
    learner = TorchLearner(ModelConfig(model=path, lora_rank=LORA_RANK, dtype=dtype_name))
    spiral_step(learner, warm, args.generations, args.max_tokens)
    rows["spiral"] = spiral_step(learner, timed, args.generations, args.max_tokens)
    del learner

    for name, defaults in (("trl_matched", False), ("trl_defaults", True)):
        torch.manual_seed(0)
        with tempfile.TemporaryDirectory() as out_dir:
            rows[name] = trl_steps(
                path, dtype, warm + timed, args.generations, args.max_tokens, defaults, out_dir
            )
    for row in rows.values():
        row["generated_tokens_per_s"] = row["generated_tokens"] / row["seconds"]
        row["trained_tokens_per_s"] = row["trained_tokens"] / row["seconds"]
    ratios = {f"speedup_vs_{n}": rows[n]["seconds"] / rows["spiral"]["seconds"] for n in rows}
    ratios.pop("speedup_vs_spiral")
    print(
        f"{'':<14} {'s/step':>8} {'gen tok':>8} {'gen tok/s':>10} {'trained tok/s':>14} {'legal':>6}"
    )
    for name, row in rows.items():
        print(
            f"{name:<14} {row['seconds']:>8.1f} {row['generated_tokens']:>8.0f} "
            f"{row['generated_tokens_per_s']:>10.1f} {row['trained_tokens_per_s']:>14.0f} "
            f"{row['legal_rate']:>6.2f}"
        )
    for key, value in ratios.items():
        print(f"{key}: {value:.2f}x")
    if args.json:
        import trl

        record = {
            "time": time.time(),
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "trl": trl.__version__,
            "dtype": dtype_name,
            "threads": torch.get_num_threads(),
            "workload": vars(args),
            "results": rows,
            "ratios": ratios,
        }
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(record, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
