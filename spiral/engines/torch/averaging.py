"""A bias-corrected moving average of a model's trainable weights (Polyak averaging).

After every optimizer step `update` folds the weights in:

    avg_t = avg_{t-1} + w_t (theta_t - avg_{t-1}),   w_t = (1 - d) / (1 - d^t)

a weighted mean of the iterates (w_1 = 1: the first iterate, no pull towards the start).
Self-play's last iterate cycles around an equilibrium; the average sits near the cycle's
centre. For LoRA the A and B factors are averaged separately (the product of averages is
not the average of products; close when the factors move slowly).

`swapped_in(named)` puts the average into the parameters for the block and restores the
live weights on exit, also on error; `capture(named, load)` reads an average saved as a
model folder by loading it into the parameters and restoring them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch

Named = Sequence[tuple[str, torch.nn.Parameter]]


@contextlib.contextmanager
def live_weights_kept(named: Named) -> Iterator[None]:
    """Whatever the block writes into the parameters, they hold their values again after."""
    live = {n: p.detach().clone() for n, p in named}
    try:
        yield
    finally:
        with torch.no_grad():
            for n, p in named:
                p.copy_(live[n])


class WeightAverage:
    """The average and how many iterates it holds (`count`)."""

    def __init__(self, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"the averaging decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.count = 0
        self.values: dict[str, torch.Tensor] = {}

    def update(self, named: Named) -> None:
        self.count += 1
        weight = (1.0 - self.decay) / (1.0 - self.decay**self.count)
        with torch.no_grad():
            for n, p in named:
                if self.count == 1:
                    self.values[n] = p.detach().clone()
                else:
                    self.values[n].lerp_(p.detach(), weight)

    @contextlib.contextmanager
    def swapped_in(self, named: Named) -> Iterator[None]:
        with live_weights_kept(named):
            with torch.no_grad():
                for n, p in named:
                    p.copy_(self.values[n])
            yield

    @classmethod
    def capture(
        cls, decay: float, count: int, named: Named, load: Callable[[], None]
    ) -> WeightAverage:
        """An average restored from a saved folder: `load()` writes it into the
        parameters, which are copied and then given back their live values."""
        average = cls(decay)
        with live_weights_kept(named):
            load()
            average.values = {n: p.detach().clone() for n, p in named}
        average.count = count
        return average
