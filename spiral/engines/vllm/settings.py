"""How a vLLM engine is opened on this machine: on a CPU (vLLM's CPU build) eager with a
fixed KV cache; on a GPU beside the learner, with the share of the device the learner
leaves, CUDA graphs, and sleep mode (the engine sleeps while the learner trains:
`engine.VllmEngine.sleep` / `wake`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spiral.errors import UsageError

GIB = 1 << 30
HEADROOM = GIB  # kept free beside vLLM's share: the CUDA context, allocator slack


@dataclass(frozen=True)
class EngineSettings:
    """How a vLLM engine is opened on this machine (module docstring)."""

    gpu: bool
    max_model_len: int = 4096
    max_loras: int = 4
    kv_cache_gb: float = 1.0  # CPU: the KV cache's memory
    memory_fraction: float = 0.9  # GPU: vLLM's share of the device (gpu_memory_utilization)

    def llm_kwargs(self) -> dict[str, Any]:
        if not self.gpu:
            # vLLM's CPU build rewinds a seeded row's generator after a chunked prefill,
            # which a CPU generator cannot do ("CPU Generator does not use offset"): whole
            # prompts only.
            return {
                "enforce_eager": True,
                "kv_cache_memory_bytes": int(self.kv_cache_gb * GIB),
                "enable_chunked_prefill": False,
                "max_num_batched_tokens": max(self.max_model_len, 8192),
            }
        return {
            "enforce_eager": False,
            "gpu_memory_utilization": self.memory_fraction,
            "enable_sleep_mode": True,
        }


def memory_fraction(free: int, total: int, reserve: int, asked: float = 0.0) -> float:
    """vLLM's share of a device whose `free` of `total` bytes are free now, beside a
    learner that will still allocate `reserve` bytes: `asked` if set (0: computed), else
    what is free less `reserve` and `HEADROOM`, at most 0.9. vLLM refuses to start on a
    share larger than what is free, so that is refused here in one line."""
    fraction = asked or min(0.9, (free - reserve - HEADROOM) / total)
    if fraction * total > free:
        raise UsageError(
            f"vllm_gpu_memory={fraction:.2f} asks for {fraction * total / GIB:.1f} GiB but "
            f"{free / GIB:.1f} GiB of the GPU are free beside the learner; lower it"
        )
    if fraction < 0.05:
        raise UsageError(
            f"only {free / GIB:.1f} GiB of {total / GIB:.1f} GiB are free beside the learner "
            f"(which still needs {reserve / GIB:.1f} GiB for its optimizer state), too little "
            "for vLLM: train LoRA (lora_rank > 0), use a smaller model, or sample with the "
            "torch engine (sampler_engine=)"
        )
    return fraction


def learner_reserve(learner: Any) -> int:
    """Bytes a torch learner still allocates after vLLM starts: fp32 gradients and
    AdamW's two moments of its trainable weights (0 where it has no torch model)."""
    model = getattr(learner, "model", None)
    if model is None:
        return 0
    from spiral.engines.torch.memory import trainable_reserve

    return trainable_reserve(model)


def engine_settings(
    device: Any,
    max_model_len: int = 4096,
    max_loras: int = 4,
    kv_cache_gb: float = 1.0,
    gpu_memory: float = 0.0,
    reserve: int = 0,
) -> EngineSettings:
    """The settings for an engine on `device` (a torch device), measuring the GPU's free
    memory now."""
    if device.type != "cuda":
        return EngineSettings(False, max_model_len, max_loras, kv_cache_gb)
    if (device.index or 0) != 0:
        raise UsageError(
            f"vLLM samples on the first visible GPU, not {device}: run with "
            f"CUDA_VISIBLE_DEVICES={device.index} and device=cuda"
        )
    import torch

    free, total = torch.cuda.mem_get_info(device)
    fraction = memory_fraction(free, total, reserve, gpu_memory)
    return EngineSettings(True, max_model_len, max_loras, kv_cache_gb, fraction)
