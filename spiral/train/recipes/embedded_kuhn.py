"""`make train`: the embedded 135M model learns single-hand Kuhn poker on 2 CPU cores.


    spiral train recipe=embedded-kuhn

Measured (docs/results.md, "Learning on Kuhn"): exploitability 0.428-0.430 before; after
120 steps, last weights 0.094 +- 0.016 (0.074 to 0.117) and averaged weights 0.078 +- 0.009
in bf16 with AVX512-BF16, 0.090 +- 0.015 (0.077 to 0.114) in fp32 on an AVX2 CPU, seeds
0-4. A run takes 19 minutes on 2 cores with AVX512-BF16; before the move floor it took
24 minutes and 2.7 GB there and 25 minutes and 3.7-3.8 GB under the AVX2 cap (fp32).

Each value was chosen by measurement: answers constrained to the legal moves (with bracket
answers the model makes too few legal moves to learn from); 384 hands a step, all 6 deals
equally often, sampled as a tree and merged into ~33 weighted rows; the focused prompt
(card and betting last); lr 1e-3 to leave the card-blind plateau (5e-5 and 3e-4 never
leave it), then x0.3 from step 30 (1e-3 throws the policy back onto the plateau; 1e-4
converges more slowly); an entropy bonus 0.3 -> 0.1 (regularised equilibrium:
exploitability 0.019, value vs Nash -0.008) and a reverse KL 0 -> 0.6 to a snapshot of the
policy refreshed every 20 steps (a proximal term that damps the cycling without moving the
fixed point); private-information centering 0.95 -> 0.5 (every seed leaves the card-blind
plateau: 0.122 +- 0.026 against 0.149 +- 0.057 and a worst of 0.269 without it); a floor
under every legal move, 0.2 x log(0.1 / p) for a move under 0.1 (the second mover's J
bluff, which died in four of nine runs without it, lives in every seed; in fp32 0.090 +-
0.015 against 0.131-0.338 without it, in bf16 0.094 +- 0.016 against 0.122 +- 0.026; its
own bias: a policy that keeps every move at 0.1 or more is at least 0.032 exploitable); a
moving average of the weights (decay 0.95) evaluated beside the last iterate, which still
cycles around the equilibrium.
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
        prompt_style="focused",
        max_tokens=8,
        batch_size=768,
        max_steps=120,
        learning_rate=schedule.parse("1e-3*0.3@30"),
        lora_rank=16,
        eval_every=20,
        save_every=20,
        learning=LearningConfig(
            balanced_chance=True,
            private_centering=schedule.linear(0.95, 0.5),
            weight_ema_decay=0.95,
        ),
        regularizer=RegularizerConfig(
            entropy_coef=schedule.linear(0.3, 0.1),
            kl_coef=schedule.linear(0.0, 0.6),
            kl_reference="snapshot",
            kl_magnet_interval=20,
            move_floor=0.1,
            move_floor_coef=0.2,
        ),
        evaluation=EvalConfig(eval_games=100),
        compute=ComputeConfig(micro_batch_tokens=4096),
    )
