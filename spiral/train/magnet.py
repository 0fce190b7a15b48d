"""The KL's snapshot magnet (`kl_reference=snapshot`), owned by the training loop.

Every `kl_magnet_interval` steps (from step 0) the magnet becomes a frozen copy of the
current policy (`refresh`), the copy named `MAGNET` among the learner's frozen copies,
whose distribution the learner's KL term reads; each phase then pulls towards the last
phase's policy (regularised Nash dynamics). The magnet is saved with every checkpoint as
`learner/magnet/` and loaded back on resume, so a resumed run pulls towards the same
weights as an uninterrupted one. Which engines can hold it: those with `frozen` copies.
"""

from __future__ import annotations

from pathlib import Path

from spiral.engines.base import MAGNET, FrozenCopies, Learner
from spiral.errors import UsageError


class SnapshotMagnet:
    """The magnet's life: refreshed on schedule, saved and loaded with checkpoints."""

    def __init__(self, learner: Learner, interval: int) -> None:
        if learner.frozen is None:
            raise UsageError(
                f"kl_reference=snapshot keeps the magnet as a frozen copy, which "
                f"{type(learner).__name__} cannot hold; use engine=torch or another kl_reference"
            )
        self.copies: FrozenCopies = learner.frozen
        self.interval = interval

    def due(self, step: int) -> bool:
        return step % self.interval == 0

    def refresh(self) -> None:
        """From now on the KL pulls towards a frozen copy of the current weights."""
        if MAGNET in self.copies.names():
            self.copies.drop(MAGNET)
        self.copies.freeze(MAGNET)

    def save(self, folder: Path) -> None:
        if MAGNET in self.copies.names():
            self.copies.save(MAGNET, folder)

    def load(self, folder: Path) -> None:
        """The magnet saved in `folder` (a checkpoint's learner/magnet/), if any."""
        if MAGNET in self.copies.names():
            self.copies.drop(MAGNET)
        if folder.is_dir():
            self.copies.load(MAGNET, folder)
