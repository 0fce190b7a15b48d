"""Minimal self-play, top to bottom: the whole idea of Spiral in one readable file.

One policy plays both seats of TicTacToe. Each step plays a batch of games (every wave of
pending turns is one batched sampler call), scores them, computes role-conditioned
advantages (seat return minus an EMA baseline per seat, read before it is updated), turns
every model turn into a training row from the exact sampled token ids, and takes one
optimiser step. The library's games, prompts, losses and torch engine do the work; the
loop itself is here so you can read it.

    python examples/minimal_selfplay.py                      # the embedded SmolLM2-135M
    python examples/minimal_selfplay.py --model PATH --steps 3 --games 4
"""

from __future__ import annotations

import argparse
import functools
import statistics

from spiral import games
from spiral.algo.losses import get_loss
from spiral.engines.base import SamplingParams
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.learner import TorchLearner
from spiral.prompts.invalid import invalid_policy
from spiral.prompts.parse import parse_move
from spiral.prompts.render import build_prompt, encode
from spiral.prompts.spec import PromptSpec
from spiral.types import Datum

GAME = "TicTacToe-v0"
SPEC = PromptSpec(template="chat", answer_format="bracket")
INVALID = invalid_policy("spiral")  # offender -1.5, other seat +0.5, game ends
EMA_DECAY = 0.95


def play_batch(sampler, n_games: int, seed: int, max_tokens: int):
    """Play n games of self-play. Returns, per game, its turns and the two seat returns."""
    states = [games.make(GAME, seed=seed * 1000 + i) for i in range(n_games)]
    turns: list[list[tuple]] = [[] for _ in states]  # (seat, prompt_ids, completion)
    returns: list[tuple[float, float] | None] = [None] * n_games
    wave = 0
    while any(r is None for r in returns):
        live = [i for i, r in enumerate(returns) if r is None]
        prompts = [
            encode(
                build_prompt(states[i], states[i].current_player(), SPEC, sampler.tokenizer),
                sampler.tokenizer,
            )
            for i in live
        ]
        params = SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=seed * 100 + wave)
        completions = sampler.sample(prompts, params)  # ONE batched call for the wave
        for i, ids, completion in zip(live, prompts, completions, strict=True):
            state, seat = states[i], states[i].current_player()
            turns[i].append((seat, ids, completion))
            move = parse_move(completion.text, state, SPEC).move
            if move is None:  # not a legal move: the game ends under the invalid policy
                r = [0.0, 0.0]
                r[seat], r[1 - seat] = INVALID.offender, INVALID.other
                returns[i] = (r[0], r[1])
                continue
            state.apply_action(move)
            if state.is_terminal():
                returns[i] = state.returns()
        wave += 1
    return turns, returns


def rae(returns, baselines: list[float]) -> tuple[list[tuple[float, float]], list[float]]:
    """Advantage = seat return - baseline (read BEFORE the update); one EMA update per batch."""
    advantages = [(r[0] - baselines[0], r[1] - baselines[1]) for r in returns]
    new = [
        EMA_DECAY * baselines[s] + (1 - EMA_DECAY) * statistics.fmean(r[s] for r in returns)
        for s in (0, 1)
    ]
    return advantages, new


def to_datums(turns, advantages) -> list[Datum]:
    """Shifted rows: predict token t+1 from tokens <= t; only sampled tokens are trained."""
    datums = []
    for game_turns, adv in zip(turns, advantages, strict=True):
        for seat, prompt_ids, completion in game_turns:
            full = list(prompt_ids) + list(completion.tokens)
            n_prompt, n_out = len(prompt_ids) - 1, len(completion.tokens)
            datums.append(
                Datum(
                    input_ids=tuple(full[:-1]),
                    target_ids=tuple(full[1:]),
                    sampler_logprobs=(0.0,) * n_prompt + tuple(completion.logprobs),
                    advantages=(0.0,) * n_prompt + (adv[seat],) * n_out,
                    mask=(0.0,) * n_prompt + (1.0,) * n_out,
                )
            )
    return datums


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--games", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--lr", type=float, default=2e-4)
    args = ap.parse_args()

    learner = TorchLearner(ModelConfig(model=args.model, lora_rank=16))
    loss_fn = functools.partial(get_loss("importance_sampling"), clip=0.2)
    baselines = [0.0, 0.0]
    for step in range(args.steps):
        sampler = learner.sampler()  # a fresh sampler bound to the current weights
        turns, returns = play_batch(sampler, args.games, seed=step, max_tokens=args.max_tokens)
        advantages, baselines = rae(returns, baselines)
        datums = to_datums(turns, advantages)
        metrics = learner.forward_backward(datums, loss_fn)
        learner.optim_step(args.lr)
        invalid = sum(
            r in ((INVALID.offender, INVALID.other), (INVALID.other, INVALID.offender))
            for r in returns
        ) / len(returns)
        print(
            f"step {step}: games {len(returns)}  invalid-ended {invalid:.2f}  "
            f"mean seat0 return {statistics.fmean(r[0] for r in returns):+.2f}  "
            f"baselines {baselines[0]:+.3f}/{baselines[1]:+.3f}  loss {metrics.get('loss', 0.0):+.4f}"
        )


if __name__ == "__main__":
    main()
