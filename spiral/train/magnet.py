"""The KL's snapshot magnet (`kl_reference=snapshot`), owned by the training loop.

The magnet is a frozen copy of the policy (`refresh`), the copy named `MAGNET` among the
learner's frozen copies, whose distribution the learner's KL term reads; each phase pulls
towards the last phase's policy (regularised Nash dynamics: R-NaD, magnetic mirror
descent with a moving magnet). Two rules move it, either or both:

- every `kl_magnet_interval` steps (from step 0);
- `kl_magnet_settle=x`: once the policy has settled on the regularised game's fixed point,
  read from the KL to the magnet that the learner measures each step
  (`train/kl_to_magnet`: exact under `rollout=full_width`, an estimate from the sampled
  rows otherwise): after a refresh it grows as the policy moves away and flattens where
  the regularised game is solved; the magnet moves once its last change is at most x
  times its largest change since the refresh (its growth has slowed to x of its
  fastest), at least `MIN_AGE` steps after the refresh.

A run without a magnet yet (step 0, or a checkpoint that holds none) takes one at once.
The magnet is saved with every checkpoint as `learner/magnet/`, the settle rule's record
beside it (`settle.json`), and loaded back on resume, so a resumed run pulls towards the
same weights and moves the magnet at the same steps as an uninterrupted one. Which
engines can hold it: those with `frozen` copies.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from spiral.engines.base import MAGNET, FrozenCopies, Learner
from spiral.errors import UsageError


class SnapshotMagnet:
    """The magnet's life: refreshed on schedule, saved and loaded with checkpoints."""

    def __init__(self, learner: Learner, interval: int, settle: float = 0.0) -> None:
        if learner.frozen is None:
            raise UsageError(
                f"kl_reference=snapshot keeps the magnet as a frozen copy, which "
                f"{type(learner).__name__} cannot hold; use engine=torch or another kl_reference"
            )
        self.copies: FrozenCopies = learner.frozen
        self.interval = interval
        self.settle = settle
        self.kls: list[float] = []  # the KL to the magnet at each step since its refresh

    def due(self, step: int) -> bool:
        if MAGNET not in self.copies.names():
            return True
        if self.interval and step % self.interval == 0:
            return True
        return self.settle > 0 and settled(self.kls, self.settle)

    def observe(self, metrics: Mapping[str, float]) -> None:
        """Record the step's KL to the magnet (for `kl_magnet_settle`)."""
        kl = metrics.get("train/kl_to_magnet")
        if kl is not None and math.isfinite(kl):
            self.kls.append(float(kl))

    def refresh(self) -> None:
        """From now on the KL pulls towards a frozen copy of the current weights."""
        if MAGNET in self.copies.names():
            self.copies.drop(MAGNET)
        self.copies.freeze(MAGNET)
        self.kls = []

    def save(self, folder: Path) -> None:
        if MAGNET in self.copies.names():
            self.copies.save(MAGNET, folder)
            if self.settle:
                (folder / SETTLE_FILE).write_text(json.dumps({"kls": self.kls}))

    def load(self, folder: Path) -> None:
        """The magnet saved in `folder` (a checkpoint's learner/magnet/), if any."""
        if MAGNET in self.copies.names():
            self.copies.drop(MAGNET)
        self.kls = []
        if folder.is_dir():
            self.copies.load(MAGNET, folder)
            record = folder / SETTLE_FILE
            if self.settle and record.is_file():
                self.kls = [float(k) for k in json.loads(record.read_text())["kls"]]


SETTLE_FILE = "settle.json"
MIN_AGE = 3  # steps a magnet is kept at least under the settle rule


def settled(kls: list[float], tolerance: float) -> bool:
    """The KL to the magnet has flattened: its last change at most `tolerance` times its
    largest change since the refresh, the magnet at least `MIN_AGE` steps old. A KL that
    still grows as fast as it did is never settled (a tolerance is below 1)."""
    if len(kls) < MIN_AGE:
        return False
    changes = [abs(b - a) for a, b in zip(kls, kls[1:], strict=False)]
    largest = max(changes)
    return largest > 0 and changes[-1] <= tolerance * largest
