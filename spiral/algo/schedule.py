"""A value that moves over a run: the learning rate and the entropy, KL and centering
coefficients are each one `Schedule`, written as one `key=value` word.

    0.3                a constant
    0.3->0.1           linear: 0.3 at the first step, 0.1 at the last
    cosine:1e-3->1e-5  half a cosine from the first value at the first step to the second
                       at the last
    1e-3*0.3@30        1e-3, times 0.3 from step 30 (more drops chain, each multiplying
                       the value before it: 1e-3*0.3@30*0.1@60)

A run of N steps has steps 0..N-1; "the last step" is N-1, so a linear or cosine schedule
reaches its end value on the run's last update. `at(step, num_steps)` is a pure function of
its arguments; `str(schedule)` gives the word back, so a saved config reads as it was given.
A schedule's drops stand at increasing steps and its values stay finite, or the word is
refused in one line. Spiral's earlier spellings of schedules (`lr_schedule`,
`entropy_coef_final`, ...) are folded into this one by `spiral/train/legacy_keys.py`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import ClassVar, Literal

from spiral.errors import UsageError

Kind = Literal["constant", "linear", "cosine", "steps"]
SYNTAX = "a number or a schedule: START->END, cosine:START->END, START*FACTOR@STEP"


@dataclass(frozen=True)
class Schedule:
    SYNTAX: ClassVar[str] = SYNTAX
    kind: Kind
    start: float
    end: float = 0.0  # linear and cosine: the value at the last step
    drops: tuple[tuple[int, float], ...] = ()  # steps: (first step, factor), in step order

    def at(self, step: int, num_steps: int) -> float:
        """The value at `step` (0-based) of a run of `num_steps` steps."""
        if self.kind == "steps":
            value = self.start
            for first, factor in self.drops:
                if step >= first:
                    value = value * factor
            return value
        if self.kind == "constant" or num_steps <= 1:
            return self.start
        frac = min(1.0, max(0.0, step / (num_steps - 1)))
        if self.kind == "linear":
            return self.start + frac * (self.end - self.start)
        return self.end + (self.start - self.end) * 0.5 * (1.0 + math.cos(math.pi * frac))

    @property
    def is_off(self) -> bool:
        """Zero at every step."""
        if self.kind == "steps":
            return self.start == 0.0
        return self.start == 0.0 and (self.kind == "constant" or self.end == 0.0)

    @property
    def values(self) -> tuple[float, ...]:
        """Every value the schedule can take at some step (for range checks)."""
        if self.kind == "constant":
            return (self.start,)
        if self.kind == "steps":
            out, value = [self.start], self.start
            for _, factor in self.drops:
                value *= factor
                out.append(value)
            return tuple(out)
        return (self.start, self.end)

    def to_json(self) -> float | str:
        """A constant as its number (as configs wrote it before schedules), else the word."""
        return self.start if self.kind == "constant" else str(self)

    def __str__(self) -> str:
        if self.kind == "constant":
            return repr(self.start)
        if self.kind == "steps":
            return repr(self.start) + "".join(f"*{f!r}@{s}" for s, f in self.drops)
        head = "cosine:" if self.kind == "cosine" else ""
        return f"{head}{self.start!r}->{self.end!r}"


def constant(value: float) -> Schedule:
    return Schedule("constant", float(value))


def linear(start: float, end: float) -> Schedule:
    return Schedule("linear", float(start), float(end))


def parse(text: str) -> Schedule:
    """The schedule a word names; `UsageError` (one line, the syntax) when it names none."""
    word = str(text).strip()
    try:
        if word.startswith("cosine:"):
            start, end = word.removeprefix("cosine:").split("->")
            return _checked(Schedule("cosine", _number(start), _number(end)))
        if "->" in word:
            start, end = word.split("->")
            return _checked(linear(_number(start), _number(end)))
        if "@" in word:
            head, *rest = word.split("*")
            drops = []
            for part in rest:
                factor, first = part.split("@")
                drops.append((_step(first), _number(factor)))
            return _checked(Schedule("steps", _number(head), drops=tuple(drops)))
        return constant(_number(word))
    except UsageError:
        raise
    except (ValueError, TypeError) as err:
        raise UsageError(f"{word!r} is not a schedule: expected {SYNTAX}") from err


def _step(text: str) -> int:
    """A step number: ASCII digits, below 2**63 like every integer key."""
    word = text.strip()
    if not re.fullmatch(r"[0-9]+", word) or int(word) >= 2**63:
        raise ValueError(text)
    return int(word)


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def _checked(schedule: Schedule) -> Schedule:
    """A schedule whose drops stand at increasing steps > 0 and whose every value is
    finite (a chain of drops can overflow), or `UsageError` naming which."""
    steps = [first for first, _ in schedule.drops]
    if any(first <= 0 for first in steps) or steps != sorted(set(steps)):
        raise UsageError(
            f"{str(schedule)!r} is not a schedule: drops must be at increasing steps > 0"
        )
    if not all(math.isfinite(v) for v in schedule.values):
        raise UsageError(f"{str(schedule)!r} is not a schedule: its values must stay finite")
    return schedule
