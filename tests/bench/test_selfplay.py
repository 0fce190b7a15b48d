"""The self-play benchmark runs on a tiny model and reports every mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from spiral.bench.selfplay import MODES, run_pool_benchmark, run_selfplay_benchmark


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from spiral.testing import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_selfplay_benchmark_reports_every_mode(tiny_model: Path) -> None:
    result = run_selfplay_benchmark(model=str(tiny_model), hands=24, extra=("lora_rank=4",))
    for mode in MODES:
        assert result[f"selfplay/{mode}/hands_per_s"] > 0
        assert result[f"selfplay/{mode}/rows"] > 0
    # 24 hands of single-hand Kuhn have at most 12 prompts x 2 answers x 2 advantage
    # signs distinct rows; unmerged there is one row per decision (>= 24).
    assert result["selfplay/plain/rows"] >= 24
    assert result["selfplay/shared_all/rows"] <= 48
    assert result["selfplay/shared_all/rows"] < result["selfplay/plain/rows"]
    assert result["selfplay/speedup"] > 0


def test_pool_benchmark_measures_members_and_both_rollouts(tiny_model: Path) -> None:
    result = run_pool_benchmark(model=str(tiny_model), hands=12, members=3, extra=("lora_rank=4",))
    assert result["pool/members"] == 3
    assert result["pool/member_mb"] > 0
    assert result["pool/plain/hands_per_s"] > 0 and result["pool/fsp/hands_per_s"] > 0
    assert result["pool/fsp_over_plain"] > 0


def test_prefix_cache_benchmark_plays_the_same_games_with_less_prefill(tiny_model: Path) -> None:
    from spiral.bench.selfplay import run_prefix_cache_benchmark

    result = run_prefix_cache_benchmark(
        model=str(tiny_model), games=3, extra=("lora_rank=4", "max_tokens=4")
    )
    assert result["prefix_cache/identical_tokens"] == 1.0
    assert result["prefix_cache/turns"] >= 3 * 5  # a TicTacToe game lasts >= 5 moves
    assert result["prefix_cache/on/prompt_tokens"] == result["prefix_cache/off/prompt_tokens"]
    # History prompts: later turns repeat earlier ones, computed once with the cache.
    on, off = result["prefix_cache/on/prefill_tokens"], result["prefix_cache/off/prefill_tokens"]
    assert on < 0.6 * off
    assert 0 < result["perf/prefix_cache_hit_rate"] <= 1
