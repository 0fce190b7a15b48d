"""What engine=tinker checks of a service before and after it trusts it: that a server
answers at all, that a local model path survives the SDK, that the service offers the
model, that a resumed state is the one that was saved, and that a server's sample reply
has what the SDK needs. Each failure is one line that says what to do.

A self-hosted Tinker-API server differs from the hosted service in ways the SDK does not
report well (docs/gpus.md): a wrong address retries for two hours, a server that has lost
a checkpoint's files can answer a load with success and fresh weights, a reply without
sequence ids fails an assertion inside the SDK.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spiral.errors import SpiralError
from spiral.types import Datum

BASE_URL_ENV = "TINKER_BASE_URL"
REACH_TIMEOUT_S = 10.0
RESTORE_TOLERANCE = 1e-4  # log-probs of the same weights, served twice
BRIDGE = "tests/engines/tinker_bridge.py"


def reachable() -> None:
    """With TINKER_BASE_URL set, a server must answer its health check, or one line."""
    base = os.environ.get(BASE_URL_ENV, "").rstrip("/")
    if not base:
        return  # the hosted service: the SDK's own address
    try:
        with urllib.request.urlopen(base + "/api/v1/healthz", timeout=REACH_TIMEOUT_S):
            return
    except urllib.error.HTTPError:
        return  # something answered: the SDK's own calls say what is wrong
    except (OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        raise SpiralError(
            f"engine=tinker: no Tinker-API server answers at {base} ({reason}); start it, "
            f"or fix {BASE_URL_ENV}"
        ) from None


def model_id(model: str) -> str:
    """A local model folder as the SDK must see it: its absolute path, which needs three or
    more slashes (the SDK reads `org/name` and `/org/name` as a hub id)."""
    path = Path(model).expanduser()
    if model.startswith("tinker://") or not path.exists():
        return model
    full = str(path.resolve())
    if full.count("/") < 3:
        raise SpiralError(
            f"engine=tinker: the local model path {full} has {full.count('/')} slashes; the "
            "Tinker SDK reads it as a hub id: put the model at a deeper path (three or more "
            "slashes, e.g. /models/local/NAME)"
        )
    return full


def offered(model: str, rest: Any = None) -> None:
    """On a self-hosted server (TINKER_BASE_URL set), the model among those it lists: such a
    server serves its one base model whatever is asked, so training another would be
    silent. The hosted service refuses an unknown model itself."""
    if rest is None:
        if not os.environ.get(BASE_URL_ENV):
            return
        import tinker

        rest = tinker.RestClient()
    try:
        listed = [m.model_name for m in rest.get_server_capabilities().result().supported_models]
    except Exception:  # a server without the call: nothing to compare
        return
    names = [n for n in listed if n]
    if names and model not in names:
        raise SpiralError(
            f"engine=tinker: the server does not offer {model}; it offers "
            f"{', '.join(names[:8])}{' ...' if len(names) > 8 else ''} (set model_name)"
        )


def probe_tokens(tokenizer: Any) -> list[int]:
    """A short fixed row whose log-probs fingerprint the weights."""
    ids = tokenizer.encode("Spiral checks that a resumed state is the saved one.")
    return [int(t) for t in ids][:16]


def probe_row(tokens: Sequence[int]) -> Datum:
    """The probe as a row whose target log-probs the training client returns."""
    n = len(tokens) - 1
    return Datum(
        input_ids=tuple(tokens[:-1]),
        target_ids=tuple(tokens[1:]),
        sampler_logprobs=(0.0,) * n,
        advantages=(0.0,) * n,
        mask=(1.0,) * n,
    )


def same_weights(saved: Sequence[float], restored: Sequence[float], where: str) -> None:
    """The restored state scores the probe as the saved one did, or one line."""
    worst = max((abs(a - b) for a, b in zip(saved, restored, strict=False)), default=0.0)
    if len(saved) != len(restored) or worst > RESTORE_TOLERANCE:
        raise SpiralError(
            f"engine=tinker: the service restored weights that differ from those saved in "
            f"{where} (log-probs differ by up to {worst:.3g}); its checkpoint files may be "
            "gone: resume from an earlier checkpoint or start the run again"
        )


def aligned(prompt_logprobs: Sequence[float | None], length: int) -> list[float | None]:
    """Prompt log-probs one per token, the first None (nothing predicts it): a server that
    leaves that None out (SkyRL's 0.4.0) would shift every later one by a token."""
    values = list(prompt_logprobs)
    if len(values) == length - 1:
        values = [None, *values]
    if len(values) != length:
        raise SpiralError(f"the service scored {len(values)} positions of {length} tokens")
    return values


def without_sequence_ids(err: AssertionError) -> SpiralError | None:
    """The one line for a server whose sample reply lacks the SDK's sequence ids."""
    if "sample_sequence_ids" not in str(err):
        return None
    return SpiralError(
        "engine=tinker: the server's sample replies lack the sequence ids the Tinker SDK "
        f"needs (SkyRL's 0.4.0 server does); run {BRIDGE} between them (docs/gpus.md)"
    )
