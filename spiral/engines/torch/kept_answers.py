"""Frozen pool members' answers drawn without a forward (sampler.py's "Frozen members'
answers"): `from_kept` walks a group's rows through the distributions kept for its member,
`keep` records them the first time the model computes them."""

from __future__ import annotations

from typing import Any

import torch

from spiral.engines.base import SamplingParams
from spiral.engines.torch.draws import draw_kept
from spiral.engines.torch.sampler_rows import Group, Row, constrained_row


def from_kept(sampler: Any, group: Group, params: SamplingParams) -> bool:
    """Sample a frozen member's group from its kept distributions, if every node its
    rows reach is kept; else restart the rows for the model (which keeps the nodes)."""
    kept = sampler.frozen.get(group.adapter)
    c = group.constraint
    if kept is None or c is None or c.think_budget > 0 or params.temperature <= 0:
        return False
    for row in group.rows:
        row.kept, row.kept_key = kept, (tuple(group.prompt), group.constraint)
    states = [row.rng.getstate() for row in group.rows]
    nodes = [list(group.rows)]
    while nodes:
        children: list[list[Row]] = []
        for members in nodes:
            lead = members[0]
            if lead.constrained is None:
                break
            forced = lead.constrained.forced_token()
            if forced is not None:
                tokens, logps = [forced] * len(members), {forced: 0.0}
            else:
                entry = kept.get((*lead.kept_key, tuple(lead.tokens)))
                if entry is None:
                    break
                uniforms = [row.rng.random() for row in members]
                tokens, logps = draw_kept(entry, uniforms, params.temperature, params.top_p)
            by_token: dict[int, list[Row]] = {}
            for row, token in zip(members, tokens, strict=True):
                row.tokens.append(token)
                row.logprobs.append(logps[token])
                sampler._advance(row, token, params)
                if row.stop_reason is None:
                    by_token.setdefault(token, []).append(row)
            children.extend(by_token.values())
        else:
            nodes = children
            continue
        _restart(sampler, group, states, params)
        return False
    sampler.last_stats["kept_rows"] += len(group.rows)
    return True


def _restart(sampler: Any, group: Group, states: list[Any], params: SamplingParams) -> None:
    for row, state in zip(group.rows, states, strict=True):
        row.rng.setstate(state)
        row.tokens, row.logprobs, row.stop_reason = [], [], None
        row.constrained = constrained_row(group.constraint, params, sampler.eos_ids, row.limit)


def keep(logits_BV: torch.Tensor, nodes: list[list[Row]]) -> None:
    """Record the raw logits of the allowed tokens at frozen members' nodes."""
    for b, members in enumerate(nodes):
        lead = members[0]
        if lead.kept is None or lead.constrained is None:
            continue
        allowed = lead.constrained.allowed()
        if allowed is None or lead.constrained.forced_token() is not None:
            continue
        ids = torch.tensor(sorted(allowed), dtype=torch.long)
        values = logits_BV[b, ids.to(logits_BV.device)].float().cpu()
        lead.kept[(*lead.kept_key, tuple(lead.tokens))] = (ids, values, logits_BV.shape[-1])
