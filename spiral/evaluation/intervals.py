"""Confidence intervals for evaluation numbers: Wilson intervals for rates, normal for means.

Choices:
- Win / draw / loss rates use the Wilson score interval, not the normal ("Wald") one:
  evaluation runs are often small (tens of games) and rates near 0 or 1 are common, where
  the Wald interval collapses to zero width and leaves [0, 1]. Wilson stays inside [0, 1]
  and is never degenerate.
- Means (returns, chip values) use the plain normal approximation mean +- z * s / sqrt(n)
  with the sample standard deviation (n - 1 in the denominator).
- No information is reported as such, never as false certainty: zero trials give the
  interval (0, 1) and a NaN rate; fewer than two values give an infinite mean interval.
  The normal interval's one blind spot stays: values that all agree (every game lost by
  the same invalid move) give a mean interval of zero width, to be read with its n.
- Pure Python (math only) so the evaluation package imports without numpy or torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

Z95 = 1.959964  # two-sided 95% standard normal quantile


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion `successes / n`.

    centre = (p + z^2 / 2n) / (1 + z^2 / n)
    half   = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / 4n^2)
    """
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if z < 0:
        raise ValueError(f"z must be non-negative, got {z}")
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1.0 - p) / n + z2 / (4 * n * n))
    # At p = 0 (or 1) the bound is exactly 0 (or 1) in exact arithmetic; pin it so
    # rounding cannot report 1e-17 or 0.9999999999999999 for a perfect record.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return (low, high)


@dataclass(frozen=True)
class Rate:
    """A counted rate (wins out of games, say) with its Wilson interval."""

    successes: int
    n: int
    z: float = Z95

    def __post_init__(self) -> None:
        if self.n < 0 or not 0 <= self.successes <= self.n:
            raise ValueError(
                f"Rate needs 0 <= successes <= n, got successes={self.successes}, n={self.n}"
            )

    @property
    def value(self) -> float:
        """successes / n; NaN when no trials were run (a 0.0 would read as 'always lost')."""
        return self.successes / self.n if self.n else math.nan

    @property
    def low(self) -> float:
        return wilson_interval(self.successes, self.n, self.z)[0]

    @property
    def high(self) -> float:
        return wilson_interval(self.successes, self.n, self.z)[1]

    def fmt(self, digits: int = 2) -> str:
        """Like "0.62 [0.55, 0.69]"."""
        return f"{self.value:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"

    def __str__(self) -> str:
        return self.fmt()


def mean_ci(values: Iterable[float], z: float = Z95) -> tuple[float, float, float]:
    """(mean, low, high) with a normal-approximation interval on the mean.

    With no values the mean is NaN; with fewer than two values the spread is unknown, so
    the interval is (-inf, inf) rather than a misleading zero width.
    """
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        return (math.nan, -math.inf, math.inf)
    mean = math.fsum(xs) / n
    if n < 2:
        return (mean, -math.inf, math.inf)
    variance = math.fsum((x - mean) ** 2 for x in xs) / (n - 1)
    half = z * math.sqrt(variance / n)
    return (mean, mean - half, mean + half)
