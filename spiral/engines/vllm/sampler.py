"""`VllmSampler`: the `Sampler` (and `AdapterSampler`) over a running `VllmEngine`
(`engine.py`, whose docstring gives the choices): constrained answers through the logits
processor, think-phase continuations, and scoring by teacher forcing."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from spiral.engines.base import SamplingCancelled, SamplingParams, check_current
from spiral.engines.vllm.engine import VllmEngine, _vllm
from spiral.engines.vllm.processor import (
    CONSTRAINT_KEY,
    SCORE_KEY,
    SCORES,
    constrained_row,
    constraint_args,
    next_score_key,
)
from spiral.types import AnswerConstraint, Completion


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
