"""Self-play throughput: hands (games) per second of one training step, by what is shared.

`run_selfplay_benchmark()` plays one step's games with the current weights and computes
one forward_backward over its rows, three times on the same games and weights:

- `plain`: every request prefilled on its own (no identical-prompt sharing in the
  sampler) and every row trained on its own (no merging);
- `shared_sampling`: identical prompts prefilled once and decoded as a tree;
- `shared_all`: that, plus identical (prompt, answer) rows merged into weighted rows.

Keys: `selfplay/<mode>/hands_per_s` (games / (sampling + learning seconds)),
`.../sample_s`, `.../learn_s`, `.../rows` (rows the learner ran), and
`selfplay/speedup` (shared_all over plain). The learner shares prompt prefixes in every
mode (its tree prefill); `spiral bench what=engine` measures that part on its own.
No optimizer step is taken, so every mode sees the same weights. Timings depend on the
machine and its load: compare modes of one run only.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import chz

from spiral.algo.assemble import assemble
from spiral.algo.losses import importance_sampling_loss
from spiral.algo.merge import merge_identical
from spiral.algo.rae import Baselines, rae_advantages
from spiral.train.config import parse_config
from spiral.train.loop import POLICY, collect
from spiral.train.setup import build_setup, make_learner_factory

MODES = ("plain", "shared_sampling", "shared_all")


def run_selfplay_benchmark(
    model: str = "embedded", hands: int = 512, extra: Sequence[str] = ()
) -> dict[str, float]:
    """Time one self-play step of preset embedded-kuhn with `hands` games per mode."""
    cfg = parse_config(
        [
            "preset=embedded-kuhn",
            f"model_name={model}",
            f"batch_size={2 * hands}",
            "prompt_style=focused",
            "log_path=/dev/null",
            *extra,
        ]
    )
    setup = build_setup(cfg)
    learner = make_learner_factory(cfg)()
    learner.temperature = cfg.temperature
    collect(chz.replace(cfg, batch_size=4), setup, learner, 0)  # warm-up
    result: dict[str, float] = {}
    for mode in MODES:
        learner.share_identical = mode != "plain"  # type: ignore[attr-defined]
        t0 = time.perf_counter()
        episodes, _ = collect(cfg, setup, learner, 0)
        t1 = time.perf_counter()
        advantages, _, _ = rae_advantages(episodes, Baselines({}), trained_agents={POLICY})
        datums, _ = assemble(episodes, advantages)
        if mode == "shared_all":
            datums, _ = merge_identical(datums)
        learner.forward_backward(datums, importance_sampling_loss)
        learner.model.zero_grad(set_to_none=True)  # type: ignore[attr-defined]
        t2 = time.perf_counter()
        prefix = f"selfplay/{mode}"
        result[f"{prefix}/sample_s"] = t1 - t0
        result[f"{prefix}/learn_s"] = t2 - t1
        result[f"{prefix}/rows"] = float(len(datums))
        result[f"{prefix}/hands_per_s"] = len(episodes) / (t2 - t0)
    result["selfplay/hands"] = float(hands)
    result["selfplay/speedup"] = (
        result["selfplay/shared_all/hands_per_s"] / result["selfplay/plain/hands_per_s"]
    )
    return result


def run_prefix_cache_benchmark(
    model: str = "embedded", games: int = 16, extra: Sequence[str] = ()
) -> dict[str, float]:
    """Sample one step of `games` TicTacToe self-play games (full-history observations,
    the original's default; constrained answers), once without the prefix cache and once
    with it: the same weights and seeds, so the same games. Keys
    `prefix_cache/<off|on>/sample_s`, `.../prefill_tokens`, `prefix_cache/speedup`,
    `prefix_cache/identical_tokens` (1.0 when every turn sampled the same tokens) and the
    cached run's `perf/*` counters."""
    cfg = parse_config(
        [
            "preset=embedded-tictactoe",
            f"model_name={model}",
            f"batch_size={2 * games}",
            "use_llm_obs_wrappers=true",
            "prompt_style=original",  # the full history in every prompt, which the cache serves
            "fsp_enabled=false",
            "log_path=/dev/null",
            *extra,
        ]
    )
    setup = build_setup(cfg)
    learner = make_learner_factory(cfg)()
    collect(chz.replace(cfg, batch_size=2), setup, learner, 0)  # warm-up
    result: dict[str, float] = {}
    tokens: dict[str, list[tuple[int, ...]]] = {}
    for mode, budget in (("off", 0.0), ("on", cfg.compute.prefix_cache_mb or 512.0)):
        learner.prefix_cache_mb = budget  # type: ignore[attr-defined]
        t0 = time.perf_counter()
        episodes, metrics = collect(cfg, setup, learner, 0)
        result[f"prefix_cache/{mode}/sample_s"] = time.perf_counter() - t0
        result[f"prefix_cache/{mode}/prefill_tokens"] = metrics["perf/prefill_tokens"]
        result[f"prefix_cache/{mode}/prompt_tokens"] = metrics["perf/prompt_tokens"]
        tokens[mode] = [t.completion.tokens for e in episodes for t in e.turns if t.completion]
        if mode == "on":
            result.update({k: v for k, v in metrics.items() if k.startswith("perf/prefix")})
    result["prefix_cache/games"] = float(games)
    result["prefix_cache/turns"] = float(len(tokens["on"]))
    result["prefix_cache/identical_tokens"] = float(tokens["on"] == tokens["off"])
    result["prefix_cache/speedup"] = (
        result["prefix_cache/off/sample_s"] / result["prefix_cache/on/sample_s"]
    )
    return result


def _rss_mb() -> float:
    """This process's resident memory now (Linux /proc; 0 where unavailable)."""
    try:
        pages = int(open("/proc/self/statm").read().split()[1])  # noqa: SIM115
    except (OSError, ValueError, IndexError):
        return 0.0
    import os

    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_pool_benchmark(
    model: str = "embedded", hands: int = 256, members: int = 25, extra: Sequence[str] = ()
) -> dict[str, float]:
    """Population play's cost: memory of `members` pool adapters, and one step's rollout
    of `hands` Kuhn games against the pool vs plain self-play (same weights).

    Keys: `pool/members`, `pool/member_mb` (one adapter's parameters in memory),
    `pool/rss_growth_mb` (resident memory added by taking the snapshots),
    Modes, each one step's rollout: `plain` self-play; `fsp_per_member` (one sampler call
    per member per wave, nothing kept: the first way); `fsp` (members batched with the
    policy, per-row adapters, members' answer distributions kept from here on);
    `fsp_kept` (step 4, after two more untimed steps: members' answers drawn from what
    the earlier steps kept, which is where a training run's store is after a few steps).
    Keys `pool/<mode>/sample_s`, `.../hands_per_s`; ratios `pool/fsp_over_plain`,
    `pool/per_member_over_batched`, `pool/kept_over_plain`.
    """
    import tempfile
    from pathlib import Path

    from spiral.evaluation.league import League
    from spiral.train.population import Pool, Population, copies, member_name

    cfg = parse_config(
        [
            "preset=embedded-kuhn",
            f"model_name={model}",
            f"batch_size={2 * hands}",
            "log_path=/dev/null",
            "rollout=sampled",  # population play samples its games
            "fsp_enabled=true",
            f"fsp_pool_size={members}",
            *extra,
        ]
    )
    setup = build_setup(cfg)
    learner = make_learner_factory(cfg)()
    learner.temperature = cfg.temperature
    collect(chz.replace(cfg, batch_size=4), setup, learner, 0)  # warm-up
    result: dict[str, float] = {"pool/members": float(members), "pool/hands": float(hands)}
    trained = sum(p.numel() * p.element_size() for _, p in learner._named_trainable())  # type: ignore[attr-defined]
    result["pool/member_mb"] = trained / 2**20
    with tempfile.TemporaryDirectory() as tmp:
        before = _rss_mb()
        names = [member_name(k) for k in range(members)]
        for name in names:
            copies(learner).freeze(name, Path(tmp) / "pool" / name)
        result["pool/rss_growth_mb"] = _rss_mb() - before
        pool = Pool(tuple((name, k) for k, name in enumerate(names)))
        population = Population(cfg, Path(tmp), pool, League(), {})
        per_member = Population(cfg, Path(tmp), pool, League(), {}, batch_members=False)
        kept = learner.frozen_answers  # type: ignore[attr-defined]
        modes = (
            ("plain", None, 1),
            ("fsp_per_member", per_member, 1),
            ("fsp", population, 1),
            ("fsp_kept", population, 4),
        )
        for mode, pop, step in modes:
            store = {} if mode == "fsp_per_member" else kept  # per member: nothing kept
            learner.frozen_answers = store  # type: ignore[attr-defined]
            if mode == "fsp_kept":
                for warm in (2, 3):  # untimed: the store fills as in training
                    collect(cfg, setup, learner, warm, pop)
            t0 = time.perf_counter()
            episodes, _ = collect(cfg, setup, learner, step, pop)
            seconds = time.perf_counter() - t0
            result[f"pool/{mode}/sample_s"] = seconds
            result[f"pool/{mode}/hands_per_s"] = len(episodes) / seconds
    result["pool/fsp_over_plain"] = result["pool/fsp/sample_s"] / result["pool/plain/sample_s"]
    result["pool/per_member_over_batched"] = (
        result["pool/fsp_per_member/sample_s"] / result["pool/fsp/sample_s"]
    )
    result["pool/kept_over_plain"] = (
        result["pool/fsp_kept/sample_s"] / result["pool/plain/sample_s"]
    )
    return result
