"""The forward passes of `TorchLearner` (learner.py): target log-probs, and at the
trained positions the terms of the next-token distribution (entropy, KL to a magnet).

- Log-probs are log_softmax(logits / temperature) of the targets, in fp32, with the
  datum's AnswerConstraint applied from the marker on (forced marker tokens: 0, answer
  tokens: masked to the trie's legal set), exactly as TorchSampler records them.
  `temperature` is an attribute the loop sets to the sampling temperature (0 -> 1).
- Logits are computed only where needed (mask > 0 in forward_backward; every target in
  `logprobs`) from the final hidden states, so long masked-out prompts never materialise
  a [tokens x vocab] tensor; the head runs a chunk of positions at a time (head.py).
- Shared prefixes, packed rows and the KL's magnet (the reference model, the snapshot,
  or the uniform distribution over legal moves): see `_hidden` and `_magnet`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

import spiral.engines.torch.checkpoint_io as checkpoint_io
import spiral.engines.torch.snapshots as snapshots
from spiral.algo.regularizers import Regularizer, uniform_magnet
from spiral.engines.base import MAGNET
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.batching import Locate, Plan, first_needed, plan_positions
from spiral.engines.torch.head import Magnet, Terms, chunk_rows, head_terms
from spiral.engines.torch.loading import load_model_and_tokenizer
from spiral.engines.torch.magnet_memo import MagnetMemo, memo_magnet, tails_alone
from spiral.engines.torch.precision import model_compute
from spiral.engines.torch.prefill import common_prefix_len, packed_hidden, prefill_grouped
from spiral.engines.torch.scoring import hidden_to_logits
from spiral.types import Datum


@dataclass
class Forward:
    per_datum: list[torch.Tensor]  # target log-probs per datum (0 where not needed)
    terms: Terms  # per planned position: target log-prob, entropy, KL to the magnet
    plan: Plan


class LogProbs:
    """The learner's forward passes over its model; `TorchLearner` sets the attributes."""

    cfg: ModelConfig
    model: Any
    tokenizer: Any
    temperature: float
    share_prefix: bool
    pack_rows: bool
    keep_magnet: bool
    frozen: Any
    _reference: Any
    _magnet_memo: MagnetMemo

    def _hidden(self, model: Any, batch: Sequence[Datum], share: bool) -> tuple[Any, Locate]:
        """Final hidden states of every row's tail, and where position t of row b is in
        them. Shared: the batch's common prefix once, each distinct prompt once
        (`prefill_grouped`); packed: every row whole, concatenated into one sequence
        (`prefill.packed_hidden`); otherwise every row whole, left-padded."""
        seqs = [list(d.input_ids) for d in batch]
        if self.pack_rows and not share:
            with model_compute(model):
                hidden_1TH = packed_hidden(model, seqs)
            offsets = [0]
            for seq in seqs[:-1]:
                offsets.append(offsets[-1] + len(seq))
            return hidden_1TH, lambda b, t: (0, offsets[b] + t)
        stem_ends = [first_needed(d) for d in batch] if share else [0] * len(batch)
        prefix_len = min(common_prefix_len(seqs), *stem_ends) if share and len(seqs) > 1 else 0
        with model_compute(model):
            pre = prefill_grouped(
                model,
                seqs,
                prefix_len,
                stem_ends,
                self.tokenizer.pad_token_id,
                output_hidden_states=True,
                logits_to_keep=1,
            )
        return pre.out.hidden_states[-1], pre.locate

    def _batch_forward(
        self, batch: Sequence[Datum], every_target: bool, reg: Regularizer | None = None
    ) -> Forward:
        """Per datum, a 1-D tensor of target log-probs (0 where not needed or forced), and
        per selected position the terms of the (tempered, constrained) distribution:
        entropy, and the KL to `reg`'s magnet where it has one (head.py, a chunk of
        positions at a time).

        Unless every target is wanted, the rows' common prefix (up to the first position
        any row needs) runs once and its KV cache is shared by all rows (`prefill`);
        gradients flow through the shared cache, so the result equals separate rows."""
        share = self.share_prefix and not every_target
        hidden_BSH, locate = self._hidden(self.model, batch, share)
        plan = plan_positions(batch, every_target, locate)
        vocab = int(self.model.get_output_embeddings().weight.shape[0])
        device = hidden_BSH.device
        target_N = torch.tensor(plan.targets, device=device, dtype=torch.long)
        terms = head_terms(
            lambda h, sl: self._log_dists(h, plan.allowed[sl]),
            hidden_BSH[plan.rows, plan.cols],
            target_N,
            self._magnet(batch, plan, share, reg, vocab) if reg is not None and plan.rows else None,
            chunk_rows(vocab),
            floor=reg.move_floor if reg is not None and reg.floored else 0.0,
        )
        lengths = [len(d.target_ids) for d in batch]
        offsets = [0]
        for n in lengths[:-1]:
            offsets.append(offsets[-1] + n)
        flat_N = torch.tensor(
            [offsets[b] + t for b, t in zip(plan.datums, plan.positions, strict=True)],
            dtype=torch.long,
        )
        values_N = terms.values_N
        flat_T = torch.zeros(sum(lengths), device=device, dtype=values_N.dtype)
        flat_T = flat_T.index_put((flat_N.to(device),), values_N)
        return Forward(list(flat_T.split(lengths)), terms, plan)

    def _log_dists(
        self, hidden_NH: torch.Tensor, allowed: list[tuple[int, ...] | None], model: Any = None
    ) -> torch.Tensor:
        """log_softmax(logits / T) per position, restricted to `allowed` where given; the
        logits from `model`'s head (default: the live model's)."""
        temperature = self.temperature if self.temperature > 0 else 1.0
        logits_NV = hidden_to_logits(model or self.model, hidden_NH) / temperature
        constrained = [k for k, a in enumerate(allowed) if a is not None]
        if constrained:
            add_NV = torch.zeros_like(logits_NV)
            for k in constrained:
                add_NV[k] = float("-inf")
                add_NV[k, list(allowed[k] or ())] = 0.0
            logits_NV = logits_NV + add_NV
        return torch.log_softmax(logits_NV, dim=-1)

    def _magnet(
        self, batch: Sequence[Datum], plan: Plan, shared: bool, reg: Regularizer, vocab: int
    ) -> Magnet | None:
        """The KL's magnet at the planned positions, by slice of positions: the model
        that `reg` names, or the uniform distribution over legal moves; None without a
        KL."""
        if reg.needs_reference_model:
            return self._reference_dists(batch, plan, shared, reg.kl_reference == "snapshot")
        if reg.kl_coef > 0:
            device = self.model.get_output_embeddings().weight.device
            return lambda sl: uniform_magnet(vocab, plan.shares[sl], device)
        return None

    def _reference_dists(
        self, batch: Sequence[Datum], plan: Plan, shared: bool, snapshot: bool
    ) -> Magnet:
        """The magnet model's log-distributions at the planned positions (no gradient),
        by slice of positions: the frozen copy named MAGNET (`snapshot`, which the loop
        refreshes), else the reference model: the base model under the LoRA adapter, or a
        frozen copy for full fine-tuning. At constrained answers they are kept while the
        magnet's weights stay (`magnet_memo.py`); elsewhere its hidden states are computed
        here and its head a chunk at a time."""
        if snapshot and MAGNET not in self.frozen.names():
            raise RuntimeError("kl_reference=snapshot: freeze the magnet before learning")
        model, weights = (
            self.model,
            [p for n, p in self.model.named_parameters() if "lora_" not in n],
        )
        if snapshot:
            context: Any = lambda: snapshots.active_adapter(self.model, MAGNET)  # noqa: E731
            weights += [p for n, p in self.model.named_parameters() if f".{MAGNET}." in n]
        elif checkpoint_io.is_peft(self.model):
            context = self.model.disable_adapter
        else:  # full fine-tuning: the frozen copy's own layers and head
            model, context = self._reference_model(), contextlib.nullcontext
            weights = list(model.parameters())
        self._magnet_memo.bind(weights)

        def batch_hidden(rows: list[Datum]) -> tuple[Any, Locate]:
            with torch.no_grad(), context():
                return self._hidden(model, rows, shared)

        def alone_hidden(rows: list[Datum]) -> list[Any]:
            with torch.no_grad(), context(), model_compute(model):
                return tails_alone(
                    model, [d.input_ids for d in rows], [first_needed(d) for d in rows]
                )

        def log_dists(hidden_NH: Any, allowed: list[tuple[int, ...] | None]) -> torch.Tensor:
            with torch.no_grad():
                return self._log_dists(hidden_NH, allowed, model)

        vocab = int(model.get_output_embeddings().weight.shape[0])
        memo = self._magnet_memo if self.share_prefix and self.keep_magnet else None
        return memo_magnet(
            batch, plan, memo, self.temperature, vocab, batch_hidden, alone_hidden, log_dists
        )

    def _reference_model(self) -> Any:
        if self._reference is None:
            from dataclasses import replace

            self._reference, _ = load_model_and_tokenizer(
                replace(self.cfg, lora_rank=0), trained=False
            )
            self._reference.requires_grad_(False)
            self._reference.eval()
        return self._reference
