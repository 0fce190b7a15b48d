"""Named sets of training values (`preset=NAME`): strings as on the command line,
applied before the user's keys (`spiral.train.config.parse_config`); and the defaults
that follow another key's value (`FOLLOWING`), applied where neither the preset nor the
user set the key."""

from __future__ import annotations

from collections.abc import Sequence

# (key, value) -> the keys that value sets unless they are given.
FOLLOWING: dict[tuple[str, str], dict[str, str]] = {
    # Rows played by older weights need a trust region: with a staleness bound of two the
    # Kuhn preset left the card-blind plateau in 2 of 5 seeds without it (0.253 +- 0.098
    # at step 120) and in 5 of 5 with it (0.099 +- 0.030; docs/results.md, "Async
    # actor-learner"). The sync loop's fresh rows sit below it, so there it never acts.
    ("use_async_actor_learner", "true"): {"lr_kl_target": "0.05"},
}


def following_defaults(given: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The `FOLLOWING` values that `given` (preset expanded, last value of a key wins)
    calls for and does not set itself."""
    last = {key: value for key, value in given}
    out: list[tuple[str, str]] = []
    for (key, value), follows in FOLLOWING.items():
        if last.get(key, "").strip().lower() == value:
            out += [(k, v) for k, v in follows.items() if k not in last]
    return out


# Presets: named sets of values (strings as on the command line), applied before user keys.
PRESETS: dict[str, dict[str, str]] = {
    # The `make train` run: the embedded 135M model learns single-hand Kuhn poker by
    # self-play on 2 CPU cores in under 30 minutes. Chosen by measurement (docs/results.md):
    # answers constrained to the legal moves (with bracket answers the model makes too few
    # legal moves to learn from); 384 hands per step, all 6 deals equally often, sampled as
    # a tree and merged into ~33 weighted rows (a step costs ~13 s); the focused prompt
    # (card and betting last); lr 1e-3 to leave the card-blind plateau (5e-5 and 3e-4
    # never leave it), then 3e-4 from step 30 (1e-3 throws the policy back onto the
    # plateau; 1e-4 converges more slowly); an entropy bonus 0.3 -> 0.1 (regularised
    # equilibrium: exploitability 0.019, value vs Nash -0.008) and a reverse KL, 0 -> 0.6,
    # to a snapshot of the policy refreshed every 20 steps (a proximal term that damps the
    # cycling without moving the fixed point); private-information centering fading 0.95
    # -> 0.5 (the cards' shared part of the policy gradient scaled down, so every seed
    # leaves the card-blind plateau: 0.122 +- 0.026 over seeds 0-4, worst 0.141, against
    # 0.149 +- 0.057 and a worst of 0.269 without it); a moving average of the weights
    # (decay 0.95) evaluated beside the last iterate, which still cycles around the
    # equilibrium.
    "embedded-kuhn": {
        "model_name": "embedded",
        "env_ids": "KuhnPokerSingle-v0",
        "template": "chat",
        "answer_format": "constrained",
        "prompt_style": "focused",
        "max_tokens": "8",
        "batch_size": "768",
        "balanced_chance": "true",
        "max_steps": "120",
        "learning_rate": "1e-3",
        "lr_schedule": "step",
        "lr_step_at": "30",
        "lr_step_factor": "0.3",
        "entropy_coef": "0.3",
        "entropy_coef_final": "0.1",
        "kl_coef": "0",
        "kl_coef_final": "0.6",
        "kl_reference": "snapshot",
        "kl_magnet_interval": "20",
        "private_centering": "0.95",
        "private_centering_final": "0.5",
        "weight_ema_decay": "0.95",
        "lora_rank": "16",
        "eval_every": "20",
        "eval_games": "100",
        "save_every": "20",
        "micro_batch_tokens": "4096",
    },
    # The paper's setting on one GPU (docs/original.md): Qwen3-4B-Base learns TicTacToe,
    # Kuhn poker and Simple Negotiation by self-play with the original's prompt (the
    # qwen3 template, free reasoning, the move in \boxed{}), no regulariser, 64 games a
    # step for 400 steps. The LoRA rank and learning rate are the Tinker port's 4B script's
    # (64, 4e-5); the reply length is the paper's own runs' (4096 tokens; the Tinker
    # scripts used 8192). Observation styles per game as in those scripts: TicTacToe the
    # latest board, the other two the full history.
    "qwen3-4b-spiral": {
        "model_name": "Qwen/Qwen3-4B-Base",
        "env_ids": "TicTacToe-v0,KuhnPoker-v1,SimpleNegotiation-v1",
        "use_llm_obs_wrappers": "false,true,true",
        "template": "qwen3",
        "answer_format": "boxed",
        "max_tokens": "4096",
        "batch_size": "128",
        "max_steps": "400",
        "learning_rate": "4e-5",
        "lora_rank": "64",
        "eval_every": "16",
        "eval_games": "32",
        "save_every": "20",
    },
    # TicTacToe on 2 CPU cores, the recipe that measurably learned (docs/results.md,
    # "TicTacToe"): the brief prompt (~125 tokens a turn), constrained answers, 64 games a
    # step (~45-80 s on two cores), lr 3e-4, an entropy bonus 0.1 -> 0.02, and sparring
    # partners: a third of the games self-play, the rest against the random and the
    # perfect player (fixed opponents; no past selves join, hence the far start). Self-play
    # alone, with or without the Kuhn preset's regulariser, did not move in 20-40 steps.
    # Evaluated greedily against both partners in both seats; `spiral eval ...
    # temperature=1` gives the sampled rates.
    "embedded-tictactoe": {
        "model_name": "embedded",
        "env_ids": "TicTacToe-v0",
        "template": "chat",
        "answer_format": "constrained",
        "prompt_style": "brief",
        "max_tokens": "8",
        "batch_size": "128",
        "max_steps": "80",
        "learning_rate": "3e-4",
        "entropy_coef": "0.1",
        "entropy_coef_final": "0.02",
        "fsp_enabled": "true",
        "fsp_fixed_opponents": "random,optimal",
        "fsp_current_fraction": "0.34",
        "fsp_start_from": "100000",
        "lora_rank": "16",
        "eval_every": "20",
        "eval_games": "50",
        "eval_opponent_names": "random,optimal",
        "eval_temperature": "0",
        "save_every": "10",
        "micro_batch_tokens": "4096",
    },
}
