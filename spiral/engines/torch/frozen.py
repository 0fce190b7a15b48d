"""The torch learner's frozen copies of its trained weights (`FrozenCopies`): pool members
and the KL's snapshot magnet.

With LoRA a copy is a second PEFT adapter over the one model in memory (`snapshots.py`):
the policy and its copies sample in one batch, each row with its own adapter, and the
learner's KL reads the magnet's distribution by switching adapters. With full fine-tuning
a copy is a weight file read into a bounded set of model copies when sampled
(`full_members.py`); it needs its folder. A copy keeps its own answer distributions for
the sampler (`frozen_answers`), dropped with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import spiral.engines.torch.snapshots as snapshots
from spiral.engines.base import Sampler
from spiral.engines.torch.full_members import MemberSampler
from spiral.engines.torch.sampler import TorchSampler


class TorchFrozenCopies:
    """`FrozenCopies` over a TorchLearner's model (spiral/engines/base.py)."""

    def __init__(self, learner: Any) -> None:
        self.learner = learner  # a TorchLearner: its model, tokenizer and sampler settings

    @property
    def share_model(self) -> bool:
        return bool(hasattr(self.learner.model, "peft_config"))

    def freeze(self, name: str, folder: Path | None = None) -> None:
        if not self.share_model:
            if folder is None:
                raise ValueError("a full-weight copy is kept on disk: give it a folder")
            self.learner.full_members.take(name, folder)
            return
        snapshots.take_snapshot(self.learner.model, name)
        if folder is not None:
            snapshots.save_snapshot(self.learner.model, name, folder)
        self.learner.frozen_answers[name] = {}

    def save(self, name: str, folder: Path) -> None:
        if not self.share_model:
            raise ValueError("a full-weight copy is written where it was frozen")
        snapshots.save_snapshot(self.learner.model, name, folder)

    def load(self, name: str, folder: Path) -> None:
        if not self.share_model:
            self.learner.full_members.load(name, folder)
            return
        snapshots.load_snapshot(self.learner.model, name, folder)
        self.learner.frozen_answers[name] = {}

    def drop(self, name: str) -> None:
        self.learner.full_members.drop(name)
        snapshots.drop_snapshot(self.learner.model, name)
        self.learner.frozen_answers.pop(name, None)

    def names(self) -> list[str]:
        if not self.share_model:
            return list(self.learner.full_members.names)
        return snapshots.snapshot_names(self.learner.model)

    def sampler(self, name: str) -> Sampler:
        learner = self.learner
        if not self.share_model:
            return MemberSampler(
                learner.full_members,
                name,
                learner.tokenizer,
                max_batch_tokens=learner.sampler_batch_tokens,
                share_identical=learner.share_identical,
                prefix_reuse=learner.prefix_reuse,
            )
        return TorchSampler(
            learner.model,
            learner.tokenizer,
            version=-1,
            max_batch_tokens=learner.sampler_batch_tokens,
            is_current=lambda: name in snapshots.snapshot_names(learner.model),
            share_identical=learner.share_identical,
            adapter=name,
            frozen=learner.frozen_answers,
            prefix_reuse=learner.prefix_reuse,
            merge_lora=learner.merge_lora,
            packed_decode=learner.packed_decode,
        )
