"""Model loading for the local torch engine: hub id, local folder or checkpoint -> model.

`load_model_and_tokenizer(ModelConfig(...))` returns a transformers causal LM (wrapped in
PEFT LoRA when `lora_rank > 0`) and its tokenizer. Accepted `model` values:

- "embedded" / "SmolLM2-135M-Instruct": the embedded default (see embedded.py);
- a local transformers folder (config.json), e.g. a full fine-tuning checkpoint or a
  `spiral export` folder (refused in one line where it is half-written or holds files
  its export did not write: model_folder.py);
- a PEFT adapter folder (adapter_config.json): its base model is resolved the same way,
  then the adapter is loaded trainable (merged into the base when `lora_rank == 0`);
- anything else is a hub id for `from_pretrained`: the hub is asked once, briefly,
  whether it answers; without it a cached model loads from the cache and any other is
  refused in one line saying what to do (`engines/hub.py`).

Whatever loads is checked: weights that do not fit `config.json` (layers, shapes, tensors
it does not account for) and a tokenizer larger than the embedding are refused in one
line (`fit.py`).

The config, the model's path, device and dtype: `engines/loading.py`. Choices:
`lora_alpha=None` means alpha = 2 * rank (the common "alpha/r = 2" scaling);
LoRA targets every linear layer except the output head ("all-linear"); device "auto" is
CUDA when available else CPU; dtype "auto" is bf16 on CUDA, bf16 for LoRA on CPUs with
native bf16 (AVX512-BF16, AMX: ~2x fp32 matmuls; `torch/cpu.py` asks torch), fp32
otherwise, and a half dtype that this CPU would only emulate is refused (`resolve_dtype`). The
dtype is what the model computes in; what is trained stays fp32 (LoRA adapters, and full
fine-tuning's weights under autocast: precision.py). A
tokenizer without a pad token gets its eos token as pad (we always pass attention masks,
so this is safe).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import spiral.engines.embedded as embedded
from spiral.engines.hub import hub_options
from spiral.engines.loading import (
    LOAD_FIX,
    DamagedModelFolder,
    ModelConfig,
    ModelNotFoundError,
    UnsafeModelFolder,
    refuse_unsafe_folder,
    resolve_device,
    resolve_dtype,
    resolve_model_path,
    weights_readable,
)
from spiral.engines.torch import fit
from spiral.errors import SpiralError


def _from_pretrained(loader: Any, source: str, **kwargs: Any) -> Any:
    """Call `loader.from_pretrained`, turning an offline hub miss into a clear error.
    transformers' own "Loading weights" bar is off: loading is a second, and every
    command would print it (downloads keep the hub's progress bars)."""
    embedded.transformers_bars_off()
    try:
        return loader.from_pretrained(source, **kwargs)
    except OSError as err:
        if Path(source).is_dir():
            raise
        cause = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise ModelNotFoundError(
            f"Could not load {source!r}: it is not a local folder and the Hugging Face hub "
            "is unreachable or does not have it. Pass a local model folder, a hub id whose "
            "files are in the Hugging Face cache, or `embedded` for the built-in "
            f"SmolLM2-135M-Instruct. Cause: {cause}"
        ) from err


@contextlib.contextmanager
def folder_reads(source: str, files: str) -> Iterator[None]:
    """Around reading `files` of the local model folder `source`: a failure that is not
    already one line (json, unicode, transformers' config checks, a missing weights file,
    tokenizers' own errors) becomes a one-line DamagedModelFolder; a hub id's pass on."""
    try:
        yield
    except SpiralError:
        raise
    except Exception as err:
        if not Path(source).is_dir():
            raise
        cause = (str(err).strip().splitlines() or [""])[0][:200]
        raise DamagedModelFolder(
            f"{source}: its {files} do not read ({type(err).__name__}: {cause}); copy them "
            "again from the model it was trained from, or export or download the model again"
        ) from err


def _load_tokenizer(source: str, cfg: ModelConfig, hub: dict[str, Any] | None = None) -> Any:
    """`source`'s tokenizer; `hub`: options for a hub id (hub.py)."""
    from transformers import AutoTokenizer

    with folder_reads(source, "tokenizer files (tokenizer.json, tokenizer_config.json)"):
        tokenizer = _from_pretrained(
            AutoTokenizer, source, trust_remote_code=cfg.trust_remote_code, **(hub or {})
        )
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    refuse_escaping_template(tokenizer, source)
    return tokenizer


_PROBE_CHAT = [
    {"role": "system", "content": "You are playing a game."},
    {"role": "user", "content": "Your move."},
]


def refuse_escaping_template(tokenizer: Any, source: str) -> None:
    """Render the tokenizer's chat template once on a probe chat and refuse, in one line,
    a template that reaches outside Jinja's sandbox (transformers renders templates in an
    immutable sandbox, so the attempt fails either way; this says so before any model
    work instead of a traceback at the first prompt). A template that merely rejects the
    probe (some refuse a system turn) is left to fail, with its message, when used."""
    if not getattr(tokenizer, "chat_template", None):
        return
    from jinja2.exceptions import SecurityError, TemplateError

    try:
        tokenizer.apply_chat_template(_PROBE_CHAT, tokenize=False, add_generation_prompt=True)
    except SecurityError as err:
        raise UnsafeModelFolder(
            f"the chat template of {source} tries to reach outside Jinja's sandbox ({err}); "
            "Spiral does not render it: use a tokenizer with a plain chat template, or a "
            "named template (template=qwen3 and others)"
        ) from err
    except (TemplateError, ValueError, TypeError):
        return


def _lora_config(cfg: ModelConfig) -> Any:
    from peft import LoraConfig

    targets: str | list[str] = cfg.lora_target_modules
    if cfg.lora_target_modules != "all-linear":
        targets = [t.strip() for t in cfg.lora_target_modules.split(",") if t.strip()]
    return LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )


def contiguous_head_input(model: Any) -> None:
    """Make the output head's input contiguous. A causal LM called with `logits_to_keep=1`
    (every prefill here) hands its head the strided slice `hidden[:, -1:, :]`; torch
    multiplies a strided 3-D input by the vocab-sized weight as a batched matmul over a
    copy of that weight per row: measured on this CPU for 33 rows of SmolLM2-135M, 161 ms
    in fp32 and 1.5 s in bf16, against 25 ms and 7 ms for the same product made
    contiguous (`docs/results.md`, "Precision")."""
    head = model.get_output_embeddings()
    if head is not None:
        head.register_forward_pre_hook(_contiguous_args)


def _contiguous_args(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.contiguous() if hasattr(a, "contiguous") else a for a in args)


def _load_causal_lm(source: str, kwargs: dict[str, Any]) -> Any:
    """The causal LM of `source`, refused in one line where its weights do not read, or
    do not fit its config.json (fit.py): tensors missing, of another shape, or that the
    config does not account for (a config cut to fewer layers than the weights hold).
    transformers would initialise a missing tensor at random, drop an extra one, and only
    log a table; that table is held back."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with folder_reads(source, "config.json or weights"), weights_readable(source):
            model, info = _from_pretrained(
                AutoModelForCausalLM,
                source,
                output_loading_info=True,
                ignore_mismatched_sizes=True,
                **kwargs,
            )
    except DamagedModelFolder as err:
        misfit = fit.header_misfit(source) if Path(source).is_dir() else None
        if misfit is None:
            raise
        raise fit.MismatchedModelFolder(misfit) from err
    finally:
        hf_logging.set_verbosity(verbosity)
    misfit = fit.misfit_message(source, model, info)
    if misfit is not None:
        raise fit.MismatchedModelFolder(misfit)
    return model


def _load_adapter(model: Any, source: str) -> Any:
    """`model` with the PEFT adapter of `source`, refused in one line where the adapter's
    file does not read, holds a tensor of another shape than its config gives (torch's
    "size mismatch"), or lacks a tensor the adapter needs (PEFT would keep that tensor's
    random start and only warn)."""
    from peft import PeftModel, get_peft_model_state_dict
    from safetensors import safe_open

    file = Path(source) / "adapter_model.safetensors"
    try:
        with weights_readable(source), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Found missing adapter keys")
            model = PeftModel.from_pretrained(model, source, is_trainable=True)
    except RuntimeError as err:
        if "size mismatch" not in str(err):
            raise
        found = str(err).strip().splitlines()[-1].strip()
        raise DamagedModelFolder(
            f"{file} does not fit its adapter_config.json ({found}); {LOAD_FIX}"
        ) from err
    if file.is_file():
        with safe_open(str(file), framework="pt") as found:
            # as snapshots.NO_HUB (not imported: snapshots' decode imports this module)
            ours = get_peft_model_state_dict(model, save_embedding_layers=False)
            missing = sorted(set(ours) - set(found.keys()))
        if missing:
            raise DamagedModelFolder(
                f"{file} lacks {len(missing)} tensor(s) the adapter needs "
                f"({', '.join(missing[:3])}); {LOAD_FIX}"
            )
    return model


def load_model_and_tokenizer(cfg: ModelConfig, trained: bool = True) -> tuple[Any, Any]:
    """Load (model, tokenizer) as `cfg` says; the model is on its device, in train mode.
    `trained` (full fine-tuning only): keep the weights in fp32 and compute in the
    resolved half dtype under autocast (precision.py), as the learner needs; a model only
    sampled or used as a frozen reference loads in the compute dtype itself."""
    import torch

    from spiral.engines.torch.attention import use_spiral_attention
    from spiral.engines.torch.precision import set_compute_dtype

    if cfg.lora_rank < 0:
        raise ValueError(f"lora_rank must be >= 0 (0 = full fine-tuning), got {cfg.lora_rank}")
    torch.manual_seed(cfg.seed)  # LoRA A matrices are random-initialised
    # The device and dtype first: a bad one is refused before any download or conversion.
    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device, full_fine_tuning=cfg.lora_rank == 0)
    source = resolve_model_path(cfg.model)
    refuse_unsafe_folder(source, cfg.trust_remote_code)
    adapter_file = Path(source) / "adapter_config.json"
    base_source = source
    if adapter_file.is_file():
        with folder_reads(source, "adapter_config.json"):
            base_name = str(json.loads(adapter_file.read_text())["base_model_name_or_path"])
        base_source = resolve_model_path(base_name)
        refuse_unsafe_folder(base_source, cfg.trust_remote_code)
    master = trained and cfg.lora_rank == 0 and dtype in (torch.bfloat16, torch.float16)
    weight_dtype = torch.float32 if master else dtype
    # a hub id: asked once, briefly, whether the hub answers (hub.py)
    hub = {} if Path(base_source).is_dir() else hub_options(base_source)
    kwargs = {"dtype": weight_dtype, "trust_remote_code": cfg.trust_remote_code, **hub}
    model = _load_causal_lm(base_source, kwargs)
    # An adapter folder without its own tokenizer (a population-play member) uses the base's.
    has_tokenizer = any(
        (Path(source) / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")
    )
    tokenizer_source = source if has_tokenizer else base_source
    from_cache = tokenizer_source == base_source and hub.get("local_files_only", False)
    tokenizer = _load_tokenizer(
        tokenizer_source, cfg, {"local_files_only": True} if from_cache else {}
    )
    fit.refuse_larger_tokenizer(model, tokenizer, tokenizer_source)
    model.to(device)
    contiguous_head_input(model)
    use_spiral_attention(model)
    if cfg.gradient_checkpointing:
        enable_activation_checkpointing(model)
    with _peft_reads_old_names():
        if adapter_file.is_file():
            with folder_reads(source, "adapter_config.json or adapter weights"):
                model = _load_adapter(model, source)
            if cfg.lora_rank == 0:
                model = model.merge_and_unload()
        elif cfg.lora_rank > 0:
            from peft import get_peft_model

            model = get_peft_model(model, _lora_config(cfg))
    if cfg.gradient_checkpointing and cfg.lora_rank > 0:
        model.enable_input_require_grads()  # checkpointed blocks need a grad-carrying input
    if master:
        set_compute_dtype(model, dtype)
    model.train()
    return model, tokenizer


def enable_activation_checkpointing(model: Any) -> None:
    """Recompute each layer's activations in the backward pass, by the name transformers
    uses now (`activation_checkpointing_enable`; `gradient_checkpointing_enable`, its
    older name, is deprecated and goes in v6), non-reentrant, without a KV cache."""
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False}
        )
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False


def activation_checkpointing_on(model: Any) -> bool:
    """Whether `model` (or the model inside a PEFT wrapper) checkpoints its activations."""
    base: Any = model.get_base_model() if hasattr(model, "get_base_model") else model
    if hasattr(base, "is_activation_checkpointing"):
        return bool(base.is_activation_checkpointing)
    return bool(base.is_gradient_checkpointing)


@contextlib.contextmanager
def _peft_reads_old_names() -> Iterator[None]:
    """PEFT (0.21) reads transformers' deprecated `is_gradient_checkpointing` when it
    wraps a model, which warns on every load; that warning is PEFT's to fix and says
    nothing to a Spiral user, so it is silenced here and nowhere else."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning
        )
        yield


@functools.cache
def _cache_keyword_of(model_class: Any) -> str:
    params = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def cache_keyword(model: Any) -> str:
    """The name the model's forward takes its KV cache by: `cache` (transformers >= 5.2x;
    `past_key_values` is deprecated there and goes in 5.40) or `past_key_values` (earlier
    releases), read from the forward's signature (PEFT wrappers looked through)."""
    base: Any = model.get_base_model() if hasattr(model, "get_base_model") else model
    model_class: Any = type(base)
    return _cache_keyword_of(model_class)


def cache_kwarg(model: Any, cache: Any) -> dict[str, Any]:
    """`{cache_keyword(model): cache}`, for one forward call."""
    return {cache_keyword(model): cache}
