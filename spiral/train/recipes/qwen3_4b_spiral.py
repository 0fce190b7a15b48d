"""The paper's setting on one GPU: Qwen3-4B-Base on TicTacToe, Kuhn and Negotiation.

As in docs/original.md, Qwen3-4B-Base learns TicTacToe, Kuhn poker and Simple Negotiation
by self-play with the original's prompt.

    spiral train recipe=qwen3-4b-spiral device=cuda

The qwen3 template, free reasoning, the move in \\boxed{}, no regulariser, 64 games a step
for 400 steps. The LoRA rank and learning rate are the Tinker port's 4B script's (64,
4e-5); the reply length is the paper's own runs' (4096 tokens; the Tinker scripts used
8192). Observation styles per game as in those scripts: TicTacToe the latest board, the
other two the full history. Not yet run on a GPU with these weights (docs/gpus.md).
"""

from __future__ import annotations

from spiral.algo import schedule
from spiral.train.config_groups import EvalConfig, PromptConfig
from spiral.train.train_config import TrainConfig


def config() -> TrainConfig:
    return TrainConfig(
        model_name="Qwen/Qwen3-4B-Base",
        env_ids=("TicTacToe-v0", "KuhnPoker-v1", "SimpleNegotiation-v1"),
        template="qwen3",
        answer_format="boxed",
        max_tokens=4096,
        batch_size=128,
        max_steps=400,
        learning_rate=schedule.constant(4e-5),
        lora_rank=64,
        eval_every=16,
        save_every=20,
        prompts=PromptConfig(use_llm_obs_wrappers=(False, True, True)),
        evaluation=EvalConfig(eval_games=32),
    )
