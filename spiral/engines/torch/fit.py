"""Whether a model folder's config.json, weights and tokenizer describe one model.

transformers builds the model its config.json describes and fills it from the weights:
tensors the config does not account for (the layers of a deeper model under a config
cut to one layer) are dropped with a logged table, and tensors it lacks or holds in
another shape would start at random. A tokenizer with more tokens than the model has
embedding rows loads too, and fails with an IndexError at the first prompt that uses
one of the extra tokens. Each is refused here, in one line naming the folder and the
mismatch, right after loading and before any prompt (`loading.load_model_and_tokenizer`).

Choices:
- the layer count is named when the difference is whole layers (every tensor of the
  layers past the shorter side missing or extra, nothing else); otherwise the first
  few tensors are named;
- a tokenizer smaller than the embedding matrix is normal (embeddings are padded to a
  multiple of 64 or 128 for speed), so only a larger one is refused;
- rotary `inv_freq` buffers saved by older checkpoints are extra tensors that change
  nothing and pass.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from spiral.engines.loading import DamagedModelFolder

MISMATCH_FIX = (
    "the folder is mismatched or hand-edited: copy, export or download the model again "
    "with the config.json of its weights"
)
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_HARMLESS = re.compile(r"(?:^|\.)rotary_emb\.inv_freq$")
_EMBEDDING = re.compile(r"(?:^|\.)(?:embed_tokens|wte|word_embeddings)\.weight$")


class MismatchedModelFolder(DamagedModelFolder):
    """A model folder whose config.json, weights and tokenizer describe different models."""


def weights_name(source: str) -> str:
    """The weights file to name in a message: the single file, else the folder."""
    single = Path(source) / "model.safetensors"
    return str(single) if single.is_file() else str(source)


def _text_config(config: Any) -> Any:
    getter = getattr(config, "get_text_config", None)
    return getter() if callable(getter) else config


def _layer_of(key: str) -> int | None:
    found = _LAYER.search(key)
    return int(found.group(1)) if found else None


def _per_layer(names: Iterable[str]) -> int:
    return sum(1 for name in names if _layer_of(name) == 0)


def _whole_layers(keys: Collection[str], per_layer: int) -> set[int] | None:
    """The layers `keys` cover whole (every key in a layer, per_layer keys each), or None."""
    layers = [_layer_of(k) for k in keys]
    if not keys or per_layer == 0 or any(i is None for i in layers):
        return None
    found = {i for i in layers if i is not None}
    return found if len(keys) == per_layer * len(found) else None


def _layers_held(declared: int, missing: set[str], extra: set[str], per_layer: int) -> int | None:
    """How many layers the weights hold, where they differ from the config by whole layers."""
    if extra and not missing:
        held = _whole_layers(extra, per_layer)
        if held is not None and held == set(range(declared, max(held) + 1)):
            return max(held) + 1
    if missing and not extra:
        lacked = _whole_layers(missing, per_layer)
        if lacked is not None and lacked == set(range(min(lacked), declared)):
            return min(lacked)
    return None


def _shapes(shape: Any) -> str:
    return " x ".join(str(int(n)) for n in shape)


def misfit_message(source: str, model: Any, info: dict[str, Any]) -> str | None:
    """One line saying how the loaded weights differ from config.json, or None when they fit.
    `info` is transformers' loading info (`output_loading_info=True`)."""
    missing = set(info.get("missing_keys") or ())
    extra = {k for k in info.get("unexpected_keys") or () if not _HARMLESS.search(k)}
    mismatched = sorted(info.get("mismatched_keys") or (), key=lambda m: str(m[0]))
    if not (missing or extra or mismatched):
        return None
    file = weights_name(source)
    config = _text_config(model.config)
    declared = getattr(config, "num_hidden_layers", None)
    if isinstance(declared, int) and not mismatched:
        held = _layers_held(declared, missing, extra, _per_layer(model.state_dict()))
        if held is not None:
            return (
                f"{source}: config.json declares {declared} layer(s) but {file} holds weights "
                f"for {held}; {MISMATCH_FIX}"
            )
    if mismatched:
        embedded = [m for m in mismatched if _EMBEDDING.search(str(m[0]))]
        name, held_shape, wanted = (embedded or mismatched)[0]
        return (
            f"{source}: {file} holds {name} as {_shapes(held_shape)} where config.json "
            f"(vocab_size {getattr(config, 'vocab_size', '?')}, hidden_size "
            f"{getattr(config, 'hidden_size', '?')}) makes it {_shapes(wanted)} "
            f"({len(mismatched)} tensor(s) of another shape); {MISMATCH_FIX}"
        )
    said = []
    if missing:
        said.append(f"lacks {len(missing)} tensor(s) it needs ({', '.join(sorted(missing)[:3])})")
    if extra:
        said.append(
            f"holds {len(extra)} tensor(s) config.json does not account for "
            f"({', '.join(sorted(extra)[:3])})"
        )
    return f"{source}: {file} {' and '.join(said)}; {MISMATCH_FIX}"


def header_misfit(source: str) -> str | None:
    """For a local folder whose load failed: how its weights' headers differ from
    config.json in layers or embedding shape (transformers can fail on such a folder
    before it reports the mismatch, e.g. with tied embeddings), or None when they agree
    or cannot be read."""
    from safetensors import safe_open

    folder = Path(source)
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        config = config.get("text_config", config) if isinstance(config, dict) else {}
        index = folder / "model.safetensors.index.json"
        if index.is_file():
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            files = sorted({str(folder / name) for name in weight_map.values()})
        else:
            files = [str(folder / "model.safetensors")]
        shapes: dict[str, list[int]] = {}
        for file in files:
            with safe_open(file, framework="pt") as handle:
                for key in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                    shapes[key] = list(handle.get_slice(key).get_shape())
    except Exception:  # the header does not read: a damaged file, said by the caller
        return None
    file = weights_name(source)
    layers = {i for i in map(_layer_of, shapes) if i is not None}
    declared = config.get("num_hidden_layers")
    if layers and isinstance(declared, int) and max(layers) + 1 != declared:
        return (
            f"{source}: config.json declares {declared} layer(s) but {file} holds weights "
            f"for {max(layers) + 1}; {MISMATCH_FIX}"
        )
    wanted = [config.get("vocab_size"), config.get("hidden_size")]
    for key, shape in shapes.items():
        if _EMBEDDING.search(key) and shape != wanted:
            return (
                f"{source}: {file} holds {key} as {_shapes(shape)} where config.json "
                f"(vocab_size {wanted[0]}, hidden_size {wanted[1]}) makes it "
                f"{wanted[0]} x {wanted[1]}; {MISMATCH_FIX}"
            )
    return None


def refuse_larger_tokenizer(model: Any, tokenizer: Any, where: str) -> None:
    """Refuse, in one line, a tokenizer with ids past the model's embedding rows; `where`
    is the folder the tokenizer came from. A smaller tokenizer passes."""
    embedding = model.get_input_embeddings()
    rows = getattr(embedding, "num_embeddings", None)
    if not isinstance(rows, int):
        return
    size = max(len(tokenizer), max(tokenizer.get_vocab().values(), default=-1) + 1)
    if size > rows:
        raise MismatchedModelFolder(
            f"{where}: its tokenizer has {size} tokens but the model's embedding has {rows} "
            f"rows (vocab_size in config.json), so tokens {rows} and up cannot be embedded; "
            "use the tokenizer the model was trained with (a smaller one is fine)"
        )
