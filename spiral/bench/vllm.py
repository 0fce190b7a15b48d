"""The torch sampler vs vLLM on one self-play step, same weights, one run (`spiral bench
what=vllm`, in the venv that has vLLM: `make setup-vllm`).

One LoRA learner of the preset's model; each repetition plays the preset's step of games
(`collect`, the loop's own function) once with the learner's torch sampler and once with
a vLLM engine sampling the same adapter (the registry's `sampled_by`, as `spiral
train sampler_engine=vllm` builds it), alternating so that both
see the same machine load. Reported per engine: seconds per step (median of the
repetitions after one untimed warm-up each), games/s, sampled tokens/s, and the ratio
vLLM / torch. The engine's start-up is reported apart (it is paid once per run).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from typing import Any

from spiral.train.config import parse_config
from spiral.train.setup import build_setup, make_learner_factory
from spiral.train.step import collect


def run_vllm_benchmark(
    preset: str, reps: int = 3, games: int = 0, extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    from spiral.engines import registry
    from spiral.engines.loading import ModelConfig

    with tempfile.TemporaryDirectory(prefix="spiral-bench-vllm-") as tmp:
        args = [f"preset={preset}", f"log_path={tmp}/run", *extra]
        if games:
            args.append(f"batch_size={2 * games}")
        cfg = parse_config(args)
        setup = build_setup(cfg)
        learner = make_learner_factory(cfg)()
        t0 = time.perf_counter()
        model = ModelConfig(cfg.model_name, lora_rank=cfg.lora_rank, dtype=cfg.dtype)
        wrapped = registry.sampled_by(  # the engine seam the training setup uses
            "vllm",
            learner,
            model,
            kv_cache_gb=cfg.compute.vllm_kv_cache_gb,
            max_model_len=cfg.compute.vllm_max_model_len,
        )
        startup = time.perf_counter() - t0
        sides: dict[str, Any] = {"torch": learner, "vllm": wrapped}
        times: dict[str, list[float]] = {name: [] for name in sides}
        tokens: dict[str, float] = {}
        for rep in range(reps + 1):
            for name, side in sides.items():
                t = time.perf_counter()
                episodes, _ = collect(cfg, setup, side, step=rep)
                seconds = time.perf_counter() - t
                if rep > 0:  # the first repetition warms caches up
                    times[name].append(seconds)
                    sampled = sum(
                        len(turn.completion.tokens)
                        for ep in episodes
                        for turn in ep.turns
                        if turn.completion is not None
                    )
                    tokens[name] = tokens.get(name, 0.0) + sampled
        out: dict[str, Any] = {"vllm/startup_s": startup, "games_per_step": cfg.games_per_step}
        for name in sides:
            step_s = statistics.median(times[name])
            out[f"{name}/step_s"] = step_s
            out[f"{name}/games_per_s"] = cfg.games_per_step / step_s
            out[f"{name}/sampled_tokens_per_s"] = tokens[name] / sum(times[name])
        out["vllm_over_torch/games_per_s"] = out["vllm/games_per_s"] / out["torch/games_per_s"]
        return out
