"""Sampling one step of games with `decode.py`'s packed decode step vs the model's own
forward (`packed_decode=false`), in one process on the same weights and games (so the
VM's drift cancels out). Arms alternate, `--reps` times, after a warm-up rep of each; the
packed arm drops its packed weights before each step, as a training step (whose update
changes the weights) does, so packing is counted. The LoRA adapter is first made non-zero
by a few learner updates on the warm-up games (PEFT starts it at zero). Checks that both
arms sampled the same tokens.

    python docs/results/engine-decode-step/decode_ab.py --preset embedded-tictactoe \
        --json out.json [key=value ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

# ab_setup.py, shared with the scripts in benchmarks/, stays there
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from ab_setup import ab_args, preset_learner, report  # noqa: E402

from spiral.engines.torch.decode import drop_packed  # noqa: E402
from spiral.train.loop import collect  # noqa: E402


def _tokens(episodes: list[Any]) -> list[tuple[int, ...]]:
    return [t.completion.tokens for e in episodes for t in e.turns if t.completion is not None]


def main() -> None:
    args = ab_args(__doc__ or "", "embedded-tictactoe", 2)
    cfg, setup, learner, _ = preset_learner(args, updates=3)
    rows: dict[str, list[float]] = {"model_forward": [], "packed": []}
    decode: dict[str, list[float]] = {"model_forward": [], "packed": []}
    same = True
    for rep in range(args.reps + 1):  # rep 0 warms each arm up and is not kept
        tokens = {}
        for arm in ("model_forward", "packed"):
            learner.packed_decode = arm == "packed"
            drop_packed(learner.model)
            start = time.perf_counter()
            episodes, metrics = collect(cfg, setup, learner, 1 + rep)
            seconds = time.perf_counter() - start
            tokens[arm] = _tokens(episodes)
            if rep > 0:
                rows[arm].append(seconds)
                decode[arm].append(metrics.get("perf/decode_tokens", 0.0))
            print(f"rep {rep} {arm}: sample {seconds:.2f} s", flush=True)
        same = same and tokens["packed"] == tokens["model_forward"]
    summary: dict[str, Any] = {
        "preset": args.preset,
        "keys": args.keys,
        "sample_s": rows,
        "decode_tokens": decode,
        "sample_s_model_forward": min(rows["model_forward"]),
        "sample_s_packed": min(rows["packed"]),
        "same_tokens": same,
    }
    summary["speedup"] = summary["sample_s_model_forward"] / summary["sample_s_packed"]
    report(summary, args.json, hide="sample_s")


if __name__ == "__main__":
    main()
