"""A bias-corrected moving average of the trained weights (Polyak averaging), owned by the
training loop and kept through any learner's `trained_state` (no engine re-implements it).

After every optimizer step the loop folds the new weights in:

    avg_t = avg_{t-1} + w_t (theta_t - avg_{t-1}),   w_t = (1 - d) / (1 - d^t)

a weighted mean of the iterates (w_1 = 1: the first iterate, no pull towards the start).
Self-play's last iterate cycles around an equilibrium; the average sits near the cycle's
centre. For LoRA the A and B factors are averaged separately (the product of averages is
not the average of products; close when the factors move slowly).

- `swapped_into(learner)`: the learner holds the average for the block (its samplers made
  inside sample it) and its live weights again after, also on error, at the same version.
- `save(folder, learner)` writes the average as a model folder any tool loads
  (`learner.save_weights`) plus `averaging.json` (decay and count); `load` reads it back
  exactly (`learner.read_weights`), so a resumed run continues the same average.

The average lives where `trained_state` puts it (CPU copies): a LoRA adapter is small; a
full model costs one copy of its weights in memory and a copy per step.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from spiral.engines.base import Learner

AVERAGING_JSON = "averaging.json"


class WeightAverage:
    """The average and how many iterates it holds (`count`)."""

    def __init__(self, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"the averaging decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.count = 0
        self.values: dict[str, torch.Tensor] = {}

    def update(self, state: Mapping[str, torch.Tensor]) -> None:
        """Fold in the weights of one more optimizer step (`learner.trained_state()`)."""
        self.count += 1
        weight = (1.0 - self.decay) / (1.0 - self.decay**self.count)
        with torch.no_grad():
            for name, value in state.items():
                if self.count == 1:
                    self.values[name] = value.detach().clone()
                else:
                    self.values[name].lerp_(value.detach(), weight)

    @contextlib.contextmanager
    def swapped_into(self, learner: Learner) -> Iterator[None]:
        if not self.values:
            raise RuntimeError("no averaged weights yet: the run has not stepped")
        live, version = learner.trained_state(), learner.version
        learner.load_trained_state(self.values, version)
        try:
            yield
        finally:
            learner.load_trained_state(live, version)

    def save(self, folder: Path, learner: Learner) -> None:
        learner.save_weights(folder, self.values)
        state = {"decay": self.decay, "count": self.count}
        (folder / AVERAGING_JSON).write_text(json.dumps(state), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path, learner: Learner, decay: float) -> WeightAverage | None:
        """The average saved in `folder`, or None when there is none (averaging then
        restarts from the next step)."""
        if not (folder / AVERAGING_JSON).is_file():
            return None
        found: dict[str, Any] = json.loads((folder / AVERAGING_JSON).read_text(encoding="utf-8"))
        average = cls(decay)
        average.values = learner.read_weights(folder)
        average.count = int(found["count"])
        return average
