"""Checkpoint integrity, for every layer that writes or reads model folders: a manifest of
each file's size and hash, sealed last, so a folder cut short or damaged is named in one
line before anything loads it (`manifest.py`). The training loop's checkpoints
(`spiral/train/checkpoint.py`), the engines' weight files, exports, pool members and the
checkpoint agents all verify through it."""
