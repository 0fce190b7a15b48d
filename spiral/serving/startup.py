"""What `spiral serve` checks before it listens, each refusal one line: an address it
could not listen on (before the model loads), and a model that could answer nothing but
errors: weights that hold NaN or inf, or a first forward pass whose logits do. Without
the weights check such a model answered every request with a 500 and a traceback."""

from __future__ import annotations

import socket
from typing import Any

from spiral.engines.base import Sampler, SamplingParams
from spiral.engines.torch.finite import non_finite_parameters
from spiral.errors import SpiralError, UsageError


class NonFiniteWeights(SpiralError, ValueError):
    """The served model's weights hold NaN or inf; no reply it drew would mean anything."""


def refuse_unusable_address(host: str, port: int) -> None:
    """One line where the server could not listen on host:port (the port in use, a host
    this machine does not have), said before the model loads and the server starts."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as err:
        reason = err.strerror or str(err)
        raise UsageError(
            f"cannot listen on {host}:{port} ({reason}); pass another port=... or a host= "
            "of this machine (127.0.0.1, 0.0.0.0)"
        ) from None


def first_non_finite(model: Any) -> tuple[str, int, int] | None:
    """(name, non-finite count, size) of the first floating-point parameter of `model`
    that holds NaN or inf, or None (a torch module; anything else is not looked at)."""
    found = non_finite_parameters(model)
    return found[0] if found else None


def refuse_broken_model(sampler: Sampler, name: str) -> None:
    """Raise NonFiniteWeights, one line, if the weights of `sampler`'s model hold NaN or
    inf; then draw one token from a short prompt, so that logits the weights turn to NaN
    (the sampler's NonFiniteLogitsError) are refused here too, not at every request."""
    found = first_non_finite(getattr(sampler, "model", None))
    if found is not None:
        tensor, bad, size = found
        raise NonFiniteWeights(
            f"the weights of {name} hold NaN or inf ({tensor}: {bad:,} of {size:,} values), "
            "so every reply would fail; serve an earlier checkpoint, or copy, export or "
            "download the model again"
        )
    tokenizer = sampler.tokenizer
    prompt = tokenizer.encode("Hello", add_special_tokens=False) or [tokenizer.eos_token_id or 0]
    sampler.sample([list(prompt)], SamplingParams(max_tokens=1, temperature=0.0))
