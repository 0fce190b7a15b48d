"""`make train`: the embedded 135M model learns single-hand Kuhn poker on 2 CPU cores.


    spiral train recipe=embedded-kuhn

Measured (docs/results.md, "Full width on Kuhn"): exploitability 0.477 before (the brief
prompt); after 200 steps see the seeds table in docs/results/kuhn-full-width/seeds/,
fp32 on a 2-core AVX2 CPU.

Each value was chosen by measurement: answers constrained to the legal moves, and no
games sampled at all: every step expands the 6 deals and every legal move
(`rollout=full_width`), scores the 12 prompts once and trains each with its moves' exact
values (the sampled preset's 384 hands a step left sampling noise in every update); the
brief prompt (the rules in a sentence and the position: a step costs a quarter of the
focused prompt's, and no full-width run stayed on the card-blind plateau); a cosine
learning rate from 3e-4 to 3e-5 (exact gradients give Adam one direction every step, so
1e-3 drove the policy pure and a constant 2e-4 alternated around where it ended); an
entropy bonus 0.1 and a reverse KL 0.2 to a snapshot of the policy refreshed every 20
steps, both held (the converging methods' fixed coefficients and moving magnet; KL 0.6
let the J bluff die); private-information centering 0.95 -> 0 (it leaves the card-blind
plateau, and fading to 0 rather than 0.5 takes its bias off the fixed point by the end); a
floor of 0.05 under every legal move (without one the faded centering let Q stop calling
and the J bluff swing; its own bias is 0.0156 at best, half the 0.1 floor's); a moving
average of the weights (decay 0.95) evaluated beside the last iterate.
"""

from __future__ import annotations

from spiral.algo import schedule
from spiral.train.config_groups import (
    ComputeConfig,
    EvalConfig,
    LearningConfig,
    RegularizerConfig,
)
from spiral.train.train_config import TrainConfig


def config() -> TrainConfig:
    return TrainConfig(
        model_name="embedded",
        env_ids=("KuhnPokerSingle-v0",),
        template="chat",
        answer_format="constrained",
        prompt_style="brief",
        max_tokens=8,
        batch_size=768,
        max_steps=200,
        learning_rate=schedule.parse("cosine:3e-4->3e-5"),
        lora_rank=16,
        eval_every=20,
        save_every=20,
        learning=LearningConfig(
            rollout="full_width",
            balanced_chance=True,
            private_centering=schedule.linear(0.95, 0.0),
            weight_ema_decay=0.95,
        ),
        regularizer=RegularizerConfig(
            entropy_coef=schedule.constant(0.1),
            kl_coef=schedule.constant(0.2),
            kl_reference="snapshot",
            kl_magnet_interval=20,
            move_floor=0.05,
            move_floor_coef=0.2,
        ),
        evaluation=EvalConfig(eval_games=100),
        compute=ComputeConfig(micro_batch_tokens=4096),
    )
