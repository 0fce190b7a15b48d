"""Which of a torch model's weights hold NaN or inf: the check `spiral serve` and
`spiral train` make before they use a model (a damaged file, not a learning rate)."""

from __future__ import annotations

from typing import Any

CHUNK = 1 << 24  # elements counted at once (a bounded temporary, whatever the tensor)


def non_finite_parameters(model: Any) -> list[tuple[str, int, int]]:
    """(name, non-finite count, size) of each floating-point parameter of `model` that
    holds NaN or inf, in the model's order; [] for anything but a torch module. One sum
    per tensor screens them all (a sum is finite only if its tensor is, barring
    overflow); only the suspects are counted, a chunk at a time. A sharded parameter
    is checked on this process's shard."""
    import torch

    if not isinstance(model, torch.nn.Module):
        return []
    with torch.no_grad():
        named = []
        for name, param in model.named_parameters():
            local = param.to_local() if hasattr(param, "to_local") else param
            if local.is_floating_point() and not local.is_meta and local.numel():
                named.append((name, local.detach()))
        if not named:
            return []
        home = named[0][1].device
        sums = torch.stack([torch.sum(t, dtype=torch.float32).to(home) for _, t in named])
        found = []
        for i, ok in enumerate(torch.isfinite(sums).tolist()):
            if ok:
                continue
            flat = named[i][1].reshape(-1)
            bad = sum(int((~torch.isfinite(part)).sum()) for part in flat.split(CHUNK))
            if bad:  # a finite tensor whose sum overflowed is no suspect
                found.append((named[i][0], bad, flat.numel()))
        return found
