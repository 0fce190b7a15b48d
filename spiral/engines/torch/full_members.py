"""Pool members for full fine-tuning: weight files on disk, loaded on demand, a bounded few
in memory.

With LoRA a member is an adapter over the one base model (snapshots.py) and costs ~20 MB;
with full fine-tuning a member is a whole model (the 135M embedded model: 0.54 GB in
fp32), so 25 of them cannot all stay resident. Here a member is a transformers model
folder (`save_pretrained` of the live model and its tokenizer, no in-memory copy; it
loads on its own, e.g. `spiral play checkpoint:<run>/pool/<member>`); at most
`max_loaded` members are held as model copies, least recently used first out, and the
copy of an evicted member is reused as the shell the next one is read into (no
reallocation).

A member is only read when it is sampled: `MemberSampler` asks the store for the
member's model at every call, so a sampler never computes with a shell that now holds
another member, and the number of models in memory stays at `max_loaded` however many
members a step meets. The cost of a tight bound is reads: a step that meets more members
than the bound reads some of them once per wave (`loads` counts every read).
"""

from __future__ import annotations

import copy
import os
import shutil
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from safetensors import SafetensorError

import spiral.engines.torch.checkpoint_io as checkpoint_io
from spiral.engines.base import SamplingParams
from spiral.engines.torch.snapshots import SnapshotError
from spiral.types import AnswerConstraint, Completion

CONFIG_FILE = "config.json"


class FullMembers:
    """Members of a full fine-tuning pool: names -> model folders, at most `max_loaded`
    of them held as frozen model copies (LRU)."""

    def __init__(self, live: Any, tokenizer: Any, max_loaded: int) -> None:
        if max_loaded < 1:
            raise ValueError(f"max_loaded must be >= 1, got {max_loaded}")
        self._live = live  # the trained model: the template of every copy
        self._tokenizer = tokenizer  # saved with each member, so its folder stands alone
        self.max_loaded = max_loaded
        self._folders: dict[str, Path] = {}
        self._loaded: OrderedDict[str, Any] = OrderedDict()
        self.loads = 0  # weight files read into a copy, over the store's life

    @property
    def names(self) -> list[str]:
        return list(self._folders)

    @property
    def loaded(self) -> list[str]:
        """Members held in memory now, least recently used first."""
        return list(self._loaded)

    def take(self, name: str, folder: Path) -> None:
        """Write the live weights to `folder` as member `name` (a temporary folder renamed
        into place, so a crash leaves no half-written member)."""
        self._check_new(name)
        folder = Path(folder)
        tmp = folder.with_name(f".tmp-{folder.name}")
        shutil.rmtree(tmp, ignore_errors=True)
        self._live.save_pretrained(str(tmp))
        self._tokenizer.save_pretrained(str(tmp))
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
        self._folders[name] = folder

    def load(self, name: str, folder: Path) -> None:
        """Register member `name` from a folder written by `take` (read when first met)."""
        self._check_new(name)
        folder = Path(folder)
        if not (folder / CONFIG_FILE).is_file():
            raise SnapshotError(f"pool member {name!r}: {folder / CONFIG_FILE} is missing")
        self._folders[name] = folder

    def drop(self, name: str) -> None:
        self._folders.pop(name, None)
        self._loaded.pop(name, None)

    def model(self, name: str) -> Any:
        """Member `name`'s frozen model, read from disk if it is not held."""
        if name not in self._folders:
            raise SnapshotError(f"no pool member named {name!r}")
        if name in self._loaded:
            self._loaded.move_to_end(name)
            return self._loaded[name]
        full = len(self._loaded) >= self.max_loaded
        shell = self._loaded.popitem(last=False)[1] if full else self._new_shell()
        try:
            checkpoint_io.load_full_weights(shell, self._folders[name])
        except (OSError, ValueError, SafetensorError) as e:  # missing, truncated, foreign
            raise SnapshotError(f"pool member {name!r}: {e}") from e
        self.loads += 1
        self._loaded[name] = shell
        return shell

    def _new_shell(self) -> Any:
        shell = copy.deepcopy(self._live)
        for p in shell.parameters():
            p.grad = None
            p.requires_grad_(False)
        return shell.eval()

    def _check_new(self, name: str) -> None:
        if not name or "." in name or "/" in name:
            raise SnapshotError(f"bad snapshot name {name!r} (not empty, no '.' or '/')")
        if name in self._folders:
            raise SnapshotError(f"a snapshot named {name!r} already exists")


class MemberSampler:
    """A sampler for one full fine-tuning member: each call samples with the member's
    model as the store holds it then (see the module docstring)."""

    def __init__(self, members: FullMembers, name: str, tokenizer: Any, **sampler_kw: Any) -> None:
        self._members, self._name, self._tokenizer = members, name, tokenizer
        self._kw = sampler_kw
        self.version = -1  # a frozen member, not a version of the trained policy

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def _sampler(self) -> Any:
        from spiral.engines.torch.sampler import TorchSampler

        if self._name not in self._members.names:
            raise SnapshotError(f"pool member {self._name!r} was dropped from the pool")
        model = self._members.model(self._name)
        return TorchSampler(model, self._tokenizer, version=-1, **self._kw)

    def sample(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        constraints: Sequence[AnswerConstraint | None] | None = None,
    ) -> list[Completion]:
        return self._sampler().sample(prompts, params, constraints)

    def score(
        self,
        prompts: Sequence[Sequence[int]],
        continuations: Sequence[Sequence[int]],
        temperature: float = 1.0,
    ) -> list[list[float]]:
        return self._sampler().score(prompts, continuations, temperature)

    def counters(self) -> dict[str, float]:
        return {}  # each call's sampler is new; members' work is not a training metric
