"""The embedded model learns TicTacToe on 2 CPU cores, with sparring partners.


    spiral train recipe=embedded-tictactoe

Measured (docs/results.md, "TicTacToe"): the brief prompt (~125 tokens a turn),
constrained answers, 64 games a step (~45-80 s on two cores), lr 3e-4, an entropy bonus
0.1 -> 0.02, and sparring partners: a third of the games self-play, the rest against the
random and the perfect player (fixed opponents; no past selves join, hence the far start).
Self-play alone, with or without the Kuhn recipe's regulariser, did not move in 20-40
steps. Evaluated greedily against both partners in both seats; `spiral eval ...
temperature=1` gives the sampled rates.
"""

from __future__ import annotations

from spiral.algo import schedule
from spiral.train.config_groups import (
    ComputeConfig,
    EvalConfig,
    PopulationConfig,
    RegularizerConfig,
)
from spiral.train.train_config import TrainConfig


def config() -> TrainConfig:
    return TrainConfig(
        model_name="embedded",
        env_ids=("TicTacToe-v0",),
        template="chat",
        answer_format="constrained",
        prompt_style="brief",
        max_tokens=8,
        batch_size=128,
        max_steps=80,
        learning_rate=schedule.constant(3e-4),
        lora_rank=16,
        eval_every=20,
        save_every=10,
        regularizer=RegularizerConfig(entropy_coef=schedule.linear(0.1, 0.02)),
        population=PopulationConfig(
            fsp_fixed_opponents=("random", "optimal"),
            fsp_current_fraction=0.34,
            fsp_start_from=100000,
        ),
        evaluation=EvalConfig(
            eval_games=50, eval_opponent_names=("random", "optimal"), eval_temperature=0.0
        ),
        compute=ComputeConfig(micro_batch_tokens=4096),
    )
