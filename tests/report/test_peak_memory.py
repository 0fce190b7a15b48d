"""Per-step peak memory: a window opened by reset_peak_rss sees what is allocated in it
and forgets the peaks before it (Linux)."""

from __future__ import annotations

import sys

import pytest

from spiral.report.run_info import reset_peak_rss, window_peak_rss_mb


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_the_window_sees_its_own_peak_and_not_the_earlier_one() -> None:
    assert reset_peak_rss()
    base = window_peak_rss_mb()
    block = bytearray(300 * 2**20)  # touched: 300 MB resident
    block[::4096] = b"x" * len(block[::4096])
    assert window_peak_rss_mb() >= base + 250
    del block
    assert reset_peak_rss()
    assert window_peak_rss_mb() < base + 150  # the 300 MB peak belonged to the last window
