"""What every engine needs to know of a model before it loads one: the `ModelConfig`,
where its weights are (`resolve_model_path`: the embedded model, a local folder or a hub
id), whether a folder is safe to load (no pickle, no code of its own), the device and the
compute dtype (`resolve_device`, `resolve_dtype`). The torch engine's loader is
`engines/torch/loading.py`; vLLM and Tinker read the same config.

A model name that looks like a path and does not exist is refused at once, not tried on
the hub (`looks_like_hub_id`), and a local folder must hold a model and not be a
half-written export (`model_folder.refuse_unfinished_export`).

Choices: `lora_alpha=None` means alpha = 2 * rank (the common "alpha/r = 2" scaling);
device "auto" is CUDA when available else CPU; dtype "auto" is bf16 on CUDA, bf16 for
LoRA on CPUs with native bf16 (AVX512-BF16, AMX: ~2x fp32 matmuls; `torch/cpu.py` asks
torch), fp32 otherwise, and a half dtype that this CPU would only emulate is refused
(`resolve_dtype`). The dtype is what the model computes in; what is trained stays fp32
(LoRA adapters, and full fine-tuning's weights under autocast: precision.py).
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import spiral.engines.embedded as embedded
from spiral.engines.model_folder import refuse_unfinished_export
from spiral.errors import SpiralError


@dataclass(frozen=True)
class ModelConfig:
    """Which weights to load and how to train them."""

    model: str
    lora_rank: int = 32  # 0 = full fine-tuning
    lora_alpha: int | None = None  # None -> 2 * lora_rank
    lora_dropout: float = 0.0
    lora_target_modules: str = "all-linear"  # or a comma-separated list of module names
    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:1" ...
    dtype: str = "auto"  # "auto" | "float32" | "bfloat16" | "float16"
    trust_remote_code: bool = False
    gradient_checkpointing: bool = False
    seed: int = 0

    @property
    def alpha(self) -> int:
        return self.lora_alpha if self.lora_alpha is not None else 2 * self.lora_rank


class ModelNotFoundError(SpiralError, FileNotFoundError):
    """A model name that is neither a model folder nor a reachable hub id."""


class DeviceError(SpiralError, ValueError):
    """A device or dtype that does not exist on this machine."""


DEVICE_HELP = "auto (CUDA if visible, else CPU), cpu, cuda or cuda:N"


def resolve_model_path(name: str) -> str:
    """Map a model name to what `from_pretrained` should get (a folder or a hub id)."""
    if name in embedded.EMBEDDED_NAMES:
        return str(embedded.ensure_embedded_model())
    path = Path(name).expanduser()
    if path.is_dir():
        refuse_unfinished_export(path)  # a half-written or mixed `spiral export` folder
        if not ((path / "config.json").is_file() or (path / "adapter_config.json").is_file()):
            raise ModelNotFoundError(
                f"{path} is a folder but holds neither config.json (a transformers model) "
                "nor adapter_config.json (a PEFT adapter); pass a model folder or a hub id"
            )
        return str(path)
    if not looks_like_hub_id(name):
        raise ModelNotFoundError(
            f"model folder {name} does not exist; pass a model folder, a hub id such as "
            "Qwen/Qwen3-4B-Base (with the hub reachable or the model in its cache) or embedded"
        )
    return name  # a hub id


class UnsafeModelFolder(SpiralError, ValueError):
    """A local model folder that would need pickle or its own code to load."""


LOAD_FIX = (
    "the file is damaged (cut short or rewritten): use an earlier checkpoint, or copy, "
    "export or download the model again"
)


class DamagedModelFolder(SpiralError, ValueError):
    """A model or adapter folder whose weights do not read (cut short, header rewritten).
    Not a DamagedCheckpointError: resume must not take a damaged base model for a
    damaged checkpoint and fall back through every one."""


def weights_readable(source: str) -> contextlib.AbstractContextManager[None]:
    """Around a `from_pretrained` of `source`: safetensors' traceback becomes one line
    naming the damaged file, the way resume reports a damaged checkpoint
    (`manifest.damaged_if_unreadable`), for train, eval, play and serve alike."""
    from spiral.checkpoints.manifest import damaged_if_unreadable

    return damaged_if_unreadable(Path(source), LOAD_FIX, DamagedModelFolder, also=())


# Pickle weights and the safetensors files that, when present, are loaded instead.
_PICKLES = {
    "pytorch_model.bin": ("model.safetensors", "model.safetensors.index.json"),
    "pytorch_model.bin.index.json": ("model.safetensors", "model.safetensors.index.json"),
    "adapter_model.bin": ("adapter_model.safetensors",),
}
_CODE_FILES = ("config.json", "tokenizer_config.json", "adapter_config.json")


def refuse_unsafe_folder(source: str, trust_remote_code: bool = False) -> None:
    """Refuse, in one line naming what, a local folder whose weights are pickles (loading
    a pickle can run code; Spiral reads safetensors) or that asks to run its own code
    (`auto_map`) without `trust_remote_code`. Hub ids and clean folders pass."""
    folder = Path(source)
    if not folder.is_dir():
        return
    pickles = [
        name
        for name, instead in _PICKLES.items()
        if (folder / name).is_file() and not any((folder / s).is_file() for s in instead)
    ]
    if pickles:
        raise UnsafeModelFolder(
            f"model folder {folder} holds pickle weights ({', '.join(pickles)}), which can run "
            "code when loaded; Spiral loads safetensors only: convert the weights "
            "(save_pretrained(..., safe_serialization=True)) and pass that folder"
        )
    if trust_remote_code:
        return
    for name in _CODE_FILES:
        try:
            data = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("auto_map"):
            raise UnsafeModelFolder(
                f"model folder {folder} asks to run its own code (auto_map in {name}); "
                "Spiral does not run code that comes with a model: use a model transformers "
                "supports itself"
            )


_HUB_PART = re.compile(r"[A-Za-z0-9][\w.-]{0,95}")


def looks_like_hub_id(name: str) -> bool:
    """Whether `name` can be a Hugging Face repo id (`name` or `owner/name`) rather than a
    local path that does not exist: a path-like start, more than one `/`, or a first part
    that is a local folder (`runs/x` with `runs/` here) make it a path, refused at once
    instead of after the hub's retries."""
    if name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name:
        return False
    parts = name.split("/")
    if len(parts) == 2 and Path(parts[0]).is_dir():
        return False
    return all(_HUB_PART.fullmatch(p) and ".." not in p and "--" not in p for p in parts)


def resolve_device(device: str) -> Any:
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        found = torch.device(device)
    except RuntimeError:
        raise DeviceError(f"device={device!r} is not a device; use {DEVICE_HELP}") from None
    if found.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise DeviceError(
                f"device={device!r} but no CUDA GPU is visible to torch {torch.__version__} "
                "here; use device=cpu (or auto), or install a CUDA build of torch"
            )
        if found.index is not None and found.index >= count:
            raise DeviceError(f"device={device!r} but only {count} CUDA GPU(s) are visible")
    elif found.type != "cpu":
        raise DeviceError(f"device={device!r} is not supported; use {DEVICE_HELP}")
    return found


def resolve_dtype(dtype: str, device: Any, full_fine_tuning: bool = False) -> Any:
    """The compute dtype. `auto`: bf16 on CUDA (LoRA: the frozen base in bf16, the adapter
    and its optimizer state in fp32; full fine-tuning: fp32 weights and optimizer state,
    bf16 products under autocast); on a CPU with native bf16 (`torch/cpu.py`), bf16 for
    LoRA and fp32 for full fine-tuning (not measured faster there under autocast); fp32
    elsewhere. A half dtype asked for on a CPU where torch would emulate it is refused."""
    import torch

    from spiral.engines.torch import cpu

    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16
        return torch.bfloat16 if cpu.native_bf16() and not full_fine_tuning else torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in table:
        raise DeviceError(f"dtype must be 'auto' or one of {sorted(table)}, got {dtype!r}")
    if device.type == "cpu" and cpu.emulated(table[dtype]):
        raise DeviceError(cpu.emulated_message(dtype))
    return table[dtype]
