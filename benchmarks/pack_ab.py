"""The learner's rows run whole: left-padded batches vs packed into one sequence.

    python benchmarks/pack_ab.py [MODEL] [OUT.json]

`ROWS` rows of random ordinary tokens, lengths spread evenly over `LENGTHS`, every
position trained; forward_backward without prefix sharing, each arm timed `REPS` times
after one untimed call, alternating. Reports seconds per call (median), the largest
gradient difference between the arms and, per arm, how many trained tensors got a
non-finite gradient.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time

import torch

from spiral.algo.losses import get_loss
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.learner import TorchLearner
from spiral.types import Datum

ROWS, LENGTHS, REPS = 32, (64, 320), 3


def _datums(vocab: int) -> list[Datum]:
    rng = random.Random(0)
    out = []
    for i in range(ROWS):
        n = LENGTHS[0] + (LENGTHS[1] - LENGTHS[0]) * i // (ROWS - 1)
        ids = [rng.randrange(100, vocab - 100) for _ in range(n + 1)]
        out.append(
            Datum(tuple(ids[:-1]), tuple(ids[1:]), (-1.0,) * n, (0.5 - i % 2,) * n, (1.0,) * n)
        )
    return out


def main() -> None:
    model = sys.argv[1] if len(sys.argv) > 1 else "embedded"
    learner = TorchLearner(ModelConfig(model, lora_rank=32, seed=0))
    learner.share_prefix = False
    datums = _datums(len(learner.tokenizer))
    loss = get_loss("importance_sampling")
    times: dict[bool, list[float]] = {False: [], True: []}
    grads: dict[bool, dict[str, torch.Tensor]] = {}
    for rep in range(REPS + 1):
        for pack in (False, True):
            learner.pack_rows = pack
            start = time.perf_counter()
            learner.forward_backward(datums, loss)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            if rep:
                times[pack].append(time.perf_counter() - start)
            grads[pack] = {n: p.grad.float().clone() for n, p in learner._named_trainable()}
            learner.model.zero_grad(set_to_none=True)
    padded, packed = statistics.median(times[False]), statistics.median(times[True])
    result = {
        "model": model,
        "rows": ROWS,
        "tokens": sum(len(d.input_ids) for d in datums),
        "dtype": str(learner.model.get_output_embeddings().weight.dtype),
        "padded_s": padded,
        "packed_s": packed,
        "speedup_packed": padded / packed,
        "max_grad_difference": max(
            float((grads[True][n] - grads[False][n]).abs().max()) for n in grads[True]
        ),
        # where the difference is NaN: which arm's gradients are not finite, in how many
        # of the trained tensors
        "nonfinite_grad_tensors": {
            arm: sum(not bool(torch.isfinite(g).all()) for g in grads[pack].values())
            for arm, pack in (("padded", False), ("packed", True))
        },
    }
    print(json.dumps(result, indent=1))
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
