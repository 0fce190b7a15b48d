"""Where `spiral eval` writes, and under which names.

Everything an evaluation of a run's checkpoint writes goes into the run folder's `eval/`
(never into the checkpoint folder, whose files its manifest protects), named by what it
holds: the checkpoint, the games, the opponents and the seed, e.g.

    RUN/eval/step_000120_KuhnPokerSingle-v0_vs_random_seed0.json
    RUN/eval/compare_KuhnPokerSingle-v0_vs_random_seed0.csv
    RUN/eval/league_KuhnPokerSingle-v0_seed0.json

A name that is taken gets `-2`, `-3`, ... so a second evaluation never overwrites the
first (`spiral report` shows them all). A model without a run writes into the working
folder under the same kind of name.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

MAX_PART = 60  # characters of one part of a name (a long checkpoint:PATH opponent)


def run_folder(checkpoint: Path | None) -> Path | None:
    """The run folder a checkpoint folder belongs to (RUN/checkpoints/step_N), if any."""
    if checkpoint is None or checkpoint.parent.name != "checkpoints":
        return None
    return checkpoint.parent.parent


def _part(text: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip("-") or "x"
    return safe[:MAX_PART]


def settings_tag(env_ids: Sequence[str], opponents: Sequence[str], seed: int) -> str:
    """`<games>_vs_<opponents>_seed<S>`; with no opponents (a league) `<games>_seed<S>`."""
    games = _part("+".join(env_ids))
    if not opponents:
        return f"{games}_seed{seed}"
    return f"{games}_vs_{_part('+'.join(opponents))}_seed{seed}"


def candidate_part(name: str) -> str:
    """A file-name part for an agent name: `ckpt:step_000120/averaged` ->
    `step_000120-averaged`, `base:embedded` -> `base-embedded`."""
    return _part(name.removeprefix("ckpt:"))


def fresh_stem(folder: Path, stem: str, suffixes: Sequence[str]) -> str:
    """`stem`, or `stem-2`, `stem-3`, ...: the first for which no `folder/stem<suffix>`
    exists (one stem for a group of files: `.csv`, `.md`, ...)."""
    found, n = stem, 1
    while any((folder / f"{found}{s}").exists() for s in suffixes):
        n += 1
        found = f"{stem}-{n}"
    return found


def fresh(path: Path) -> Path:
    """`path`, or `stem-2.suffix`, `stem-3.suffix`, ...: the first that does not exist."""
    return path.with_name(fresh_stem(path.parent, path.stem, [path.suffix]) + path.suffix)
