"""`spiral bench`: throughput numbers measured on this machine, in one run.

    spiral bench what=games            random-play games/s for every registered game
    spiral bench what=engine model=embedded batch=16 prompt_tokens=256 new_tokens=32 dtypes=auto
    spiral bench what=selfplay model=embedded hands=512   Kuhn hands/s, by what is shared
    spiral bench what=pool model=embedded hands=256 members=25   population play cost
    spiral bench what=prefix_cache model=embedded games=16   TicTacToe with/without the cache
    spiral bench what=async preset=embedded-kuhn steps=6   sync loop vs async actor-learner
    spiral bench what=vllm preset=embedded-kuhn steps=3    a self-play step: torch vs vLLM
    spiral bench what=all out=bench.json                  games + engine

Numbers are reported as measured (and as ratios where two are compared, e.g. prefix reuse
vs plain `generate`), never asserted in tests.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import chz

from spiral.args import help_text, non_negative, parse_command, positive, wants_help
from spiral.errors import UsageError
from spiral.report.writable import check_writable_file


@chz.chz
class BenchArgs:
    """usage: spiral bench [what=games|engine|selfplay|all] [key=value ...]

    Throughput measured on this machine, in one run (ratios where two things compare)."""

    what: Literal["games", "engine", "selfplay", "pool", "prefix_cache", "async", "vllm", "all"] = (
        chz.field(
            default="all",
            doc="games: random-play games/s; engine: sampling; selfplay: Kuhn hands/s; "
            "pool: population play's memory and rollout time with `members` adapters; "
            "prefix_cache: a TicTacToe step sampled with and without the prefix cache; "
            "async: the sync loop (all threads) vs the async actor-learner (half each); "
            "vllm: a preset's self-play step sampled by the torch engine and by vLLM",
        )
    )
    model: str = chz.field(default="embedded", doc="model for engine and selfplay")
    batch: int = chz.field(default=16, doc="engine: prompts per batch", validator=positive)
    prompt_tokens: int = chz.field(default=256, doc="engine: prompt length", validator=positive)
    new_tokens: int = chz.field(default=32, doc="engine: tokens generated", validator=positive)
    lora_rank: int = chz.field(
        default=32,
        doc="engine: the learner's LoRA rank; 0 = full fine-tuning",
        validator=non_negative,
    )
    dtypes: str = chz.field(
        default="auto",
        doc="engine: comma-separated dtypes to measure (float32, bfloat16); auto: float32, "
        "plus bfloat16 on a GPU or a CPU with native bf16, with bf16/fp32 ratios",
        validator=lambda obj, attr: _check_dtypes(getattr(obj, attr)),
    )
    hands: int = chz.field(default=512, doc="selfplay: Kuhn hands per step", validator=positive)
    members: int = chz.field(default=25, doc="pool: adapters in the pool", validator=positive)
    games: int = chz.field(
        default=16, doc="prefix_cache: TicTacToe games; vllm: games per step", validator=positive
    )
    seconds: float = chz.field(default=2.0, doc="games: seconds per game", validator=positive)
    preset: str = chz.field(default="embedded-kuhn", doc="async, vllm: the training preset")
    steps: int = chz.field(default=6, doc="async, vllm: timed steps per mode", validator=positive)
    warmup: int = chz.field(default=2, doc="async: untimed steps first", validator=positive)
    out: str = chz.field(default="", doc="also write the numbers to this JSON file")


def bench_games(seconds: float) -> dict[str, float]:
    from spiral import games
    from spiral.bench.games import games_per_second

    return {f"games_per_s/{g}": games_per_second(g, seconds=seconds) for g in games.ids()}


DTYPES = ("float32", "bfloat16")


def _named_dtypes(spec: str) -> list[str]:
    names = [d.strip() for d in spec.split(",") if d.strip()]
    if not names or any(d not in DTYPES for d in names):
        raise UsageError(
            f"dtypes={spec!r}: expected auto, or float32 and/or bfloat16 (comma-separated)"
        )
    return names


def _check_dtypes(spec: str) -> None:
    if spec != "auto":
        _named_dtypes(spec)


def engine_dtypes(spec: str) -> list[str]:
    """The dtypes `dtypes=` names; `auto`: float32, plus bfloat16 where it is native."""
    if spec != "auto":
        return _named_dtypes(spec)
    import torch

    from spiral.engines.torch.cpu import native_bf16

    native = torch.cuda.is_available() or native_bf16()
    return ["float32", "bfloat16"] if native else ["float32"]


def check_dtypes_here(dtypes: list[str], full_fine_tuning: bool) -> None:
    """Every dtype asked for runs on this machine (not emulated), checked before any model
    work: a refusal after the first dtype's benchmark would throw its minutes away."""
    from spiral.engines.loading import DeviceError, resolve_device, resolve_dtype

    device = resolve_device("auto")
    for dtype in dtypes:
        try:
            resolve_dtype(dtype, device, full_fine_tuning=full_fine_tuning)
        except DeviceError as err:
            raise UsageError(str(err).replace("dtype=auto or float32", "dtypes=float32")) from None


def bench_engine(args: BenchArgs) -> dict[str, float]:
    """The engine benchmark per dtype (keys prefixed `<dtype>/` when more than one), and
    bf16-over-fp32 ratios of learner and decode tokens/s when both ran."""
    from spiral.engines.torch.measure import run_engine_benchmark

    dtypes = engine_dtypes(args.dtypes)
    check_dtypes_here(dtypes, full_fine_tuning=args.lora_rank == 0)
    results: dict[str, float] = {}
    for dtype in dtypes:
        one = run_engine_benchmark(
            model=args.model,
            batch=args.batch,
            prompt_tokens=args.prompt_tokens,
            new_tokens=args.new_tokens,
            lora_rank=args.lora_rank,
            dtype=dtype,
        )
        prefix = f"{dtype}/" if len(dtypes) > 1 else ""
        results.update({prefix + k: v for k, v in one.items()})
    if len(dtypes) > 1:
        for key in ("learn/tokens_per_s", "sample/decode_tokens_per_s"):
            results[f"bf16_over_fp32/{key}"] = (
                results[f"bfloat16/{key}"] / results[f"float32/{key}"]
            )
    return results


def bench_selfplay(args: BenchArgs) -> dict[str, float]:
    from spiral.bench.selfplay import run_selfplay_benchmark

    return run_selfplay_benchmark(model=args.model, hands=args.hands)


def bench_pool(args: BenchArgs) -> dict[str, float]:
    from spiral.bench.selfplay import run_pool_benchmark

    return run_pool_benchmark(model=args.model, hands=args.hands, members=args.members)


def bench_prefix_cache(args: BenchArgs) -> dict[str, float]:
    from spiral.bench.selfplay import run_prefix_cache_benchmark

    return run_prefix_cache_benchmark(model=args.model, games=args.games)


def bench_async(args: BenchArgs) -> dict[str, float]:
    import os

    from spiral.bench.async_loop import run_async_benchmark

    return run_async_benchmark(
        preset=args.preset,
        model=args.model,
        steps=args.steps,
        warmup=args.warmup,
        threads=os.cpu_count() or 2,
    )


def bench_vllm(args: BenchArgs) -> dict[str, Any]:
    from spiral.bench.vllm import run_vllm_benchmark

    return run_vllm_benchmark(preset=args.preset, reps=args.steps, games=args.games)


def machine() -> dict[str, Any]:
    import os

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        info["torch"] = None
    return info


def _fmt(value: Any) -> str:
    if not isinstance(value, float):
        return str(value)
    return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}"


def main(argv: Sequence[str]) -> int:
    if wants_help(argv):
        print(help_text(BenchArgs, "bench"))
        return 0
    args = parse_command(BenchArgs, argv, "bench")
    if args.out:  # before minutes of timing, not after them
        check_writable_file(args.out, "out")
    what = args.what
    results: dict[str, Any] = {"machine": machine()}
    if what in ("games", "all"):
        results.update(bench_games(args.seconds))
    if what in ("engine", "all"):
        results.update(bench_engine(args))
    if what == "selfplay":
        results.update(bench_selfplay(args))
    if what == "pool":
        results.update(bench_pool(args))
    if what == "prefix_cache":
        results.update(bench_prefix_cache(args))
    if what == "async":
        results.update(bench_async(args))
    if what == "vllm":
        results.update(bench_vllm(args))
    width = max(len(k) for k in results)
    for key, value in results.items():
        shown = _fmt(value)
        print(f"{key:<{width}}  {shown}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2), encoding="utf-8")
        print(f"wrote {args.out}")
    return 0
