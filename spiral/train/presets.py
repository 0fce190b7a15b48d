"""Named sets of training values (`preset=NAME`): strings as on the command line,
applied before the user's keys (`spiral.train.config.parse_config`)."""

from __future__ import annotations

# Presets: named sets of values (strings as on the command line), applied before user keys.
PRESETS: dict[str, dict[str, str]] = {
    # The `make train` run: the embedded 135M model learns single-hand Kuhn poker by
    # self-play on 2 CPU cores in about 28 minutes. Chosen by measurement (docs/results.md):
    # answers constrained to the legal moves (with bracket answers the model makes too few
    # legal moves to learn from); 512 hands per step, all 6 deals equally often, sampled as
    # a tree and merged into ~33 weighted rows (a step costs ~14 s); the focused prompt
    # (card and betting last); lr 1e-3 (5e-5 and 3e-4 never leave the card-blind
    # plateau), cosine decay; an entropy bonus 0.3 -> 0.1 and a forward KL to uniform
    # over the legal moves 0 -> 0.05 (regularised equilibrium: exploitability 0.042);
    # a moving average of the weights (decay 0.95) evaluated beside the last iterate,
    # which cycles around the equilibrium.
    "embedded-kuhn": {
        "model_name": "embedded",
        "env_ids": "KuhnPokerSingle-v0",
        "template": "chat",
        "answer_format": "constrained",
        "prompt_style": "focused",
        "max_tokens": "8",
        "batch_size": "1024",
        "balanced_chance": "true",
        "max_steps": "120",
        "learning_rate": "1e-3",
        "lr_schedule": "cosine",
        "entropy_coef": "0.3",
        "entropy_coef_final": "0.1",
        "kl_coef": "0",
        "kl_coef_final": "0.05",
        "kl_reference": "uniform",
        "kl_direction": "forward",
        "weight_ema_decay": "0.95",
        "lora_rank": "16",
        "eval_every": "10",
        "eval_games": "100",
        "save_every": "20",
        "micro_batch_tokens": "4096",
    },
    # TicTacToe, constrained answers, 8 games per step (~50 s per step on 2 CPU cores).
    "embedded-tictactoe": {
        "model_name": "embedded",
        "env_ids": "TicTacToe-v0",
        "template": "chat",
        "answer_format": "constrained",
        "max_tokens": "8",
        "batch_size": "16",
        "max_steps": "20",
        "learning_rate": "1e-4",
        "lora_rank": "16",
        "eval_every": "10",
        "eval_games": "50",
        "save_every": "10",
        "micro_batch_tokens": "4096",
    },
}
