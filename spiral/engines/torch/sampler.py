"""TorchSampler: batched KV-cache sampling with prefix reuse on a transformers model.

Our own decode loop (not `generate`) so that we own the log-probs, the answer constraint
and the stop rules. One `sample` call:

1. groups identical requests (same prompt ids, same constraint): a group is prefilled
   once, however many rows it holds (self-play asks the same question many times: single-
   hand Kuhn poker has 12 distinct prompts, a TicTacToe batch opens with one);
2. sorts the groups by their token ids, so prompts sharing a prefix (a game's rules, its
   earlier turns) sit next to each other, and cuts them into chunks whose KV-cache cost
   fits `max_batch_tokens`;
3. per chunk, runs the chunk's longest common token prefix ONCE (batch 1), repeats its KV
   cache over the groups, then prefills the differing suffixes as one left-padded batch
   (layout `[prefix][pads][suffix]`, explicit attention mask and position ids, so pads
   are invisible and every row sees positions 0..n-1 exactly as an unpadded forward);
4. decodes as a tree: a *node* is a set of live rows with the same prompt and the same
   tokens so far, so they share one next-token distribution. Each step runs one forward
   token per node, every row draws its own token from its node's distribution, and rows
   that drew the same token form a child node (the KV cache is copied only when a node
   branches). Free text soon branches into one node per row, which is the ordinary
   batched decode; a constrained answer over a few legal moves never has more nodes than
   moves, so 512 identical Kuhn prompts cost about as much as one. Each step's forward
   runs through a `Decoder` (decode.py): our packed step for Llama-shaped models, the
   model's own forward otherwise.

Adapters (population play): `sample(..., adapters=)` names each row's LoRA adapter (None:
the sampler's own, by default the trained one). Rows of different adapters never share a
group; a chunk that mixes adapters runs as one batch through PEFT's mixed-adapter forward
(the base model's matmuls batched over every row, each adapter's low-rank update on its
own rows), with the shared prefix prefilled once per adapter. So the current policy and
every pool member it meets in a wave cost one batched call, not one call per member.

Frozen members' answers (`frozen=`): a pool member never changes, so the distribution it
gives over a constrained answer's legal tokens, after a given prompt and answer prefix,
is kept the first time it is computed (raw logits of the allowed tokens, a few numbers
per node) and later rows of that member on that prompt are drawn from the kept
distributions without a forward, with the same per-row uniforms and the same
inverse-CDF draw as the model path. A row whose walk reaches a node not seen yet goes to
the model with its group (its draws restarted), which records the nodes it visits. Games
whose prompts repeat (single-hand Kuhn: 12) then cost a pool what they cost one policy.
The trained adapter is never kept (it changes every step); the learner owns the store
and drops a member's entries with the member.

Log-probs: each sampled token records log_softmax(logits / T) at that token, under the
constraint's mask when one applies; forced marker tokens record 0.0. With top_p < 1 the
token is drawn from the nucleus but the recorded log-prob is that of the UNTRUNCATED
tempered distribution, because that is what the learner recomputes (top_p is then an
off-policy sampler that the loss's importance ratio does not see; keep top_p = 1 for
on-policy training). T = 0 means greedy, with log-probs recorded at T = 1.

Determinism: row i draws its uniforms from its own `random.Random(seed, i)` and tokens by
inverse CDF, so a completion depends only on (seed, its index, its prompt), not on the
other prompts, on chunking or on grouping, up to floating-point differences between batch
shapes. Rows of one node get bit-identical log-probs (computed once).

Stop reasons: "eos" (an eos token, kept in the tokens), "stop" (a stop string appeared in
the decoded text: tokens are cut at the token that completes it, and `text` is always
`decode(tokens)`, so it may run a few characters past the stop string when a token
straddles it; also a constrained answer that completed), "length" (max_tokens reached,
or the model's context: a row never runs past `max_position_embeddings` with its prompt,
a constrained row keeping room for its marker and longest choice; a prompt that leaves
no room for a reply is refused in one line, `sampler_rows.row_limit`).
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from spiral.engines.base import (
    SamplingCancelled,
    SamplingParams,
    StaleSamplerError,
    check_current,
)
from spiral.engines.torch import kept_answers
from spiral.engines.torch.decode import Decoder, ModelDecoder
from spiral.engines.torch.draws import (
    draw_inverse_cdf,
    mask_to_allowed,
    non_finite_error,
)
from spiral.engines.torch.graphs import StaticDecoder, step_decoder
from spiral.engines.torch.kv_cache import PrefixCache
from spiral.engines.torch.merged import merged
from spiral.engines.torch.precision import model_compute
from spiral.engines.torch.prefill import (
    prefill,
    prefill_cached,
    supports_prefix_cache,
)
from spiral.engines.torch.runahead import run_ahead, runs_ahead
from spiral.engines.torch.sampler_rows import (
    STAT_KEYS,
    Group,
    Row,
    chunk_rows,
    eos_token_ids,
    eval_mode,
    group_cost,
    group_rows,
    model_context,
    new_rows,
    row_budget,
)
from spiral.engines.torch.scoring import score_continuations
from spiral.engines.torch.snapshots import TRAINED, SnapshotError, active_adapter
from spiral.types import AnswerConstraint, Completion


class TorchSampler:
    """Sampler over a (possibly PEFT-wrapped) transformers causal LM."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        version: int = 0,
        max_batch_tokens: int = 32768,
        prefix_reuse: bool = True,
        is_current: Callable[[], bool] | None = None,
        share_identical: bool = True,
        adapter: str | None = None,
        frozen: dict[str, dict[Any, Any]] | None = None,
        prefix_cache_mb: float = 0.0,
        merge_lora: bool = True,
        packed_decode: bool = True,
    ) -> None:
        self.model = model
        # sampled free text over CUDA graphs decodes ahead of the host (runahead.py);
        # off: the tree decode, one host read per token (the benchmark's baseline)
        self.run_ahead = True
        self.merge_lora = merge_lora  # compute with the adapter merged in (merged.py)
        self.packed_decode = packed_decode  # decode.py's own step where it applies
        self.adapter = adapter  # a pool member's LoRA adapter (snapshots.py); None: trained
        # frozen adapter name -> its kept answer distributions (module docstring)
        self.frozen = frozen if frozen is not None else {}
        self._tokenizer = tokenizer
        self.version = version
        self.max_batch_tokens = max_batch_tokens
        self.prefix_reuse = prefix_reuse
        self.share_identical = share_identical
        self._is_current = is_current
        self.eos_ids = eos_token_ids(model, tokenizer)
        self.context = model_context(model)  # prompt + reply never run past it
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else min(self.eos_ids))
        self.last_stats: dict[str, float] = {}
        self.totals = dict.fromkeys(STAT_KEYS, 0.0)  # over every call (`counters`)
        # KV of the prompts of earlier calls (kv_cache.py); this sampler's weights only.
        self.prefix_cache: PrefixCache | None = None
        if prefix_cache_mb > 0 and prefix_reuse and supports_prefix_cache(model):
            self.prefix_cache = PrefixCache(int(prefix_cache_mb * 2**20))

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def _check_current(self) -> None:
        if self.adapter is not None and self._is_current is not None and not self._is_current():
            raise StaleSamplerError(
                f"pool member {self.adapter!r} was dropped from the pool; sample another member"
            )
        check_current(self._is_current, self.version)

    def sample(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        constraints: Sequence[AnswerConstraint | None] | None = None,
        adapters: Sequence[str | None] | None = None,
    ) -> list[Completion]:
        """One completion per prompt; see the module docstring for the rules. `adapters`:
        each prompt's LoRA adapter (None: this sampler's own)."""
        self._check_current()
        if constraints is not None and len(constraints) != len(prompts):
            raise ValueError(f"{len(constraints)} constraints for {len(prompts)} prompts")
        own = self.adapter or TRAINED
        names = [a or own for a in adapters] if adapters is not None else [own] * len(prompts)
        if len(names) != len(prompts):
            raise ValueError(f"{len(names)} adapter names for {len(prompts)} prompts")
        self._check_adapters(set(names))
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token (e.g. the chat template's)")
        cons = list(constraints) if constraints is not None else [None] * len(prompts)
        base_seed = (
            params.seed if params.seed is not None else random.SystemRandom().getrandbits(62)
        )
        rows = new_rows(prompts, cons, params, base_seed, self.context, self.eos_ids)
        groups = group_rows(prompts, cons, rows, names, self.share_identical)
        self.last_stats = dict.fromkeys(STAT_KEYS, 0.0)
        groups = [g for g in groups if not kept_answers.from_kept(self, g, params)]
        costs = [group_cost(g, params) for g in groups]
        order = sorted(range(len(groups)), key=lambda k: groups[k].prompt)
        self.last_stats["rows"] = float(len(rows))
        self.last_stats["groups"] = float(len(groups))
        mixed = len(set(names)) > 1
        with self._computing(None if mixed else names[0]):
            for chunk in chunk_rows(costs, order, self.max_batch_tokens):
                self._run_chunk([groups[k] for k in chunk], params, mixed)
        for key, value in self.last_stats.items():
            self.totals[key] = self.totals.get(key, 0.0) + value
        return [self._completion(r, cons[r.index]) for r in rows]

    def running_batch(self, **options: Any) -> Any:
        """An empty batch that rows join and leave between tokens (running.py): a
        server's iteration-level batching."""
        from spiral.engines.torch.running import RunningBatch

        return RunningBatch(self, **options)

    @contextlib.contextmanager
    def _computing(self, adapter: str | None) -> Iterator[None]:
        """The model as this sampler computes with it: eval mode without autograd, LoRA
        adapter `adapter` active (None: rows of several adapters, PEFT's mixed batch),
        merged into the base weights where it can be (merged.py), else with its products
        in the base dtype (precision.py)."""
        merge = merged(self.model, adapter or TRAINED, enabled=self.merge_lora and bool(adapter))
        with contextlib.ExitStack() as stack:
            is_merged = stack.enter_context(merge)
            stack.enter_context(eval_mode(self.model))
            stack.enter_context(active_adapter(self.model, adapter))
            if not is_merged:  # the adapters' products run only off the merge
                stack.enter_context(model_compute(self.model))
            yield

    def counters(self) -> dict[str, float]:
        """Work done over this sampler's calls, as `perf/*` metrics: prompt tokens asked
        for and computed in prefill (the rest came from shared prefixes and the prefix
        cache), and the prefix cache's hit rate and memory."""
        t = self.totals
        out = {
            "perf/prompt_tokens": t["prompt_tokens"],
            "perf/prefill_tokens": t["prefill_tokens"],
            "perf/decode_tokens": t["decode_tokens"],
        }
        if t["prompt_tokens"] > 0:
            out["perf/prefill_saved_fraction"] = 1.0 - t["prefill_tokens"] / t["prompt_tokens"]
        cache = self.prefix_cache
        if cache is not None:
            out["perf/prefix_cache_held_mb"] = cache.held_bytes / 2**20
            out["perf/prefix_cache_evicted_mb"] = cache.evicted_bytes / 2**20
            if cache.lookup_tokens > 0:
                out["perf/prefix_cache_hit_rate"] = cache.hit_tokens / cache.lookup_tokens
        return out

    def _check_adapters(self, names: set[str]) -> None:
        if names == {TRAINED}:
            return
        known = set(getattr(self.model, "peft_config", {}))
        missing = sorted(names - known)
        if missing:
            raise SnapshotError(f"no LoRA adapter (pool member) named {missing[0]!r}")

    def _completion(self, row: Row, constraint: AnswerConstraint | None) -> Completion:
        text = self._tokenizer.decode(row.tokens, skip_special_tokens=True)
        answer_start = None
        if constraint is not None:
            answer_start = len(row.tokens) - len(row.constrained.answer) if row.constrained else 0
        assert row.stop_reason is not None
        return Completion(
            tokens=tuple(row.tokens),
            logprobs=tuple(row.logprobs),
            stop_reason=row.stop_reason,
            text=text,
            answer_start=answer_start,
            constraint=constraint,
        )

    def _run_chunk(self, groups: list[Group], params: SamplingParams, mixed: bool) -> None:
        stats = self.last_stats
        t0 = time.perf_counter()
        seqs = [g.prompt for g in groups]
        max_prefix = min(len(s) for s in seqs) - 1 if self.prefix_reuse else 0
        names_B = [g.adapter for g in groups] if mixed else None  # per cache row
        if self.prefix_cache is not None:
            adapters = [g.adapter for g in groups]
            pre = prefill_cached(
                self.model,
                seqs,
                adapters,
                self.pad_id,
                self.prefix_cache,
                mixed=mixed,
                logits_to_keep=1,
            )
        else:
            pre = prefill(self.model, seqs, max_prefix, self.pad_id, names_B, logits_to_keep=1)
        stats["prompt_tokens"] += sum(len(g.prompt) * len(g.rows) for g in groups)
        stats["prefill_tokens"] += pre.computed_tokens
        t1 = time.perf_counter()
        stats["prefill_s"] += t1 - t0
        decoder: Decoder | None = None  # made when a first token is to be fed
        logits_BV = pre.out.logits[:, -1, :]
        if (
            self.run_ahead
            and names_B is None
            and runs_ahead([g.constraint for g in groups], params)
        ):
            decoder = self._decoder(pre, groups, params, names_B)
            if isinstance(decoder, StaticDecoder):  # CUDA graphs: no read per step
                rows_G = [g.rows for g in groups]
                stats["decode_tokens"] += run_ahead(
                    decoder, logits_BV, rows_G, params, self._advance
                )
                stats["decode_s"] += time.perf_counter() - t1
                return
        nodes = [list(g.rows) for g in groups]  # node b <-> row b of the cache
        while nodes:
            if params.cancel is not None and params.cancel.is_set():
                raise SamplingCancelled("sampling was cancelled (SamplingParams.cancel)")
            if self.frozen:
                kept_answers.keep(logits_BV, nodes)
            children = self._step(logits_BV, nodes, params)
            stats["decode_tokens"] += len(nodes)
            if not children:
                break
            parents = [parent for parent, _, _ in children]
            device = logits_BV.device
            if decoder is None:
                decoder = self._decoder(pre, groups, params, names_B)
            if parents != list(range(len(nodes))):  # a node ended or branched
                decoder.select(torch.tensor(parents, device=device))
            nodes = [members for _, _, members in children]
            logits_BV = decoder.step(torch.tensor([t for _, t, _ in children], device=device))
        stats["decode_s"] += time.perf_counter() - t1

    def _decoder(
        self, pre: Any, groups: list[Group], params: SamplingParams, names_B: list[str] | None
    ) -> Decoder:
        """The packed decode step where it applies (decode.py), else the model's forward."""
        if self.packed_decode and names_B is None:
            room = max(row_budget(params, g.constraint) for g in groups)
            packed = step_decoder(self.model, pre, room, groups[0].adapter)
            if packed is not None:
                return packed
        return ModelDecoder(self.model, pre, names_B)

    def _step(
        self, logits_BV: torch.Tensor, nodes: list[list[Row]], params: SamplingParams
    ) -> list[tuple[int, int, list[Row]]]:
        """Choose one token per row of every node, record it, update stop reasons.

        Returns the live children as (parent node, token, rows): rows of one node that
        drew the same token and have not finished."""
        temperature = params.temperature if params.temperature > 0 else 1.0
        scaled_BV = logits_BV.float() / temperature
        finite = torch.isfinite(scaled_BV).all()  # read after the draws: one wait per step
        mask_to_allowed(scaled_BV, [m[0].constrained for m in nodes])
        logp_BV = torch.log_softmax(scaled_BV, dim=-1)
        forced = [m[0].constrained.forced_token() if m[0].constrained else None for m in nodes]
        free = [b for b, f in enumerate(forced) if f is None]
        picks: list[list[int]] = []
        values: list[list[float]] = []
        if free:  # queued on the device; read back below, after the finiteness check
            free_t = torch.tensor(free, device=logp_BV.device) if len(free) < len(nodes) else None
            logp_FV = logp_BV[free_t] if free_t is not None else logp_BV
            if params.temperature > 0:
                uniforms = [[row.rng.random() for row in nodes[b]] for b in free]
                picks_FK = draw_inverse_cdf(logp_FV, uniforms, params.top_p)
            else:
                picks_FK = logp_FV.argmax(dim=-1, keepdim=True).expand(-1, max(map(len, nodes)))
            picks, values = picks_FK.tolist(), logp_FV.gather(1, picks_FK).tolist()
        drawn = {b: picks[i][: len(nodes[b])] for i, b in enumerate(free)}
        logps = {b: values[i][: len(nodes[b])] for i, b in enumerate(free)}
        if not finite.item():
            raise non_finite_error()
        children: list[tuple[int, int, list[Row]]] = []
        for b, members in enumerate(nodes):
            fixed = forced[b]
            tokens = [fixed] * len(members) if fixed is not None else drawn[b]
            row_logps = [0.0] * len(members) if fixed is not None else logps[b]
            by_token: dict[int, list[Row]] = {}
            logprob_of: dict[int, float] = {}
            for row, token, value in zip(members, tokens, row_logps, strict=True):
                by_token.setdefault(int(token), []).append(row)
                logprob_of[int(token)] = value
            for token, rows in by_token.items():
                logprob = logprob_of[token]
                for row in rows:
                    row.tokens.append(token)
                    row.logprobs.append(logprob)
                    self._advance(row, token, params)
                live = [row for row in rows if row.stop_reason is None]
                if live:
                    children.append((b, token, live))
        return children

    def _advance(self, row: Row, token: int, params: SamplingParams) -> None:
        if row.constrained is not None:
            row.constrained.push(token)
            if row.constrained.done:
                row.stop_reason = "stop"
            elif len(row.tokens) >= row_budget(params, row.constrained.constraint):
                row.stop_reason = "length"  # never reached with finite logits; a backstop
            return
        if token in self.eos_ids:
            row.stop_reason = "eos"
        elif params.stop and self._hits_stop(row.tokens, params.stop):
            row.stop_reason = "stop"
        elif len(row.tokens) >= (params.max_tokens if row.limit is None else row.limit):
            row.stop_reason = "length"

    def _hits_stop(self, tokens: list[int], stops: tuple[str, ...]) -> bool:
        # Checked every step, so a new match must end in the newest tokens: decoding a short
        # tail (longest stop string + slack for tokens that decode to no character) suffices.
        window = max(len(s) for s in stops) + 8
        tail = self._tokenizer.decode(tokens[-window:], skip_special_tokens=True)
        return any(s in tail for s in stops)

    def score(
        self,
        prompts: Sequence[Sequence[int]],
        continuations: Sequence[Sequence[int]],
        temperature: float = 1.0,
    ) -> list[list[float]]:
        """Log-probs of each continuation given its prompt at `temperature` (<= 0: 1), batched.

        A chunk runs as a tree (`prefill_grouped`): the chunk's common prefix once, each
        distinct prompt once, then every row's continuation. Scoring every legal move of
        many positions (an exploitability table) computes each position's prompt once.
        """
        self._check_current()
        if len(prompts) != len(continuations):
            raise ValueError(f"{len(prompts)} prompts but {len(continuations)} continuations")
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        with self._computing(self.adapter or TRAINED):
            return score_continuations(
                self.model, prompts, continuations, temperature, self.pad_id,
                self.prefix_reuse, self.max_batch_tokens,
            )  # fmt: skip
