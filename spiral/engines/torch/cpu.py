"""What this CPU does with half precision, asked through torch once per process.

Two questions decide every CPU choice the engine makes about bf16 and fp16:

- `prepacks(dtype)`: does oneDNN's prepacked linear, which the packed decode step uses,
  take weights of this dtype here? Asked by packing a small weight and multiplying with
  it, so the answer is torch's own. fp32 it takes wherever torch has oneDNN; bf16 it takes
  only with AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT, fp16 with AVX512-FP16 or
  AVX-NE-CONVERT. Where it refuses a half dtype, torch emulates that dtype's matrix
  products: a 2048x2048 bf16 product ran at 0.3-0.9 GFLOP/s against 100-130 in fp32 on
  the same CPU, so `loading.resolve_dtype` refuses such a dtype rather than run ~100x slower.
- `native_bf16()`: are bf16 products faster than fp32 here (AVX512-BF16 or AMX on x86,
  the BF16 extension on Arm, which oneDNN needs for bf16 there)? Only then does
  `dtype=auto` choose bf16 (for LoRA).

`SPIRAL_CPU_BF16` overrides the answers: `0` makes this CPU one without bf16 (no bf16 or
fp16 prepacking, `auto` is fp32, an explicit half dtype refused), so any machine can run
as the commonest CPUs do; `1` makes `auto` choose bf16 and lets an explicit half dtype run
where torch emulates it. Prepacking is never forced on: it is what oneDNN takes.
"""

from __future__ import annotations

import functools
import os
import platform
from typing import Any

CPU_BF16_ENV = "SPIRAL_CPU_BF16"  # "0" / "1": override the probe (see the module's text)


_OFF, _ON = ("0", "false", "no", "off"), ("1", "true", "yes", "on")


def _forced() -> bool | None:
    value = os.environ.get(CPU_BF16_ENV)
    if value is None or not value.strip():
        return None
    word = value.strip().lower()
    if word not in _OFF + _ON:
        from spiral.engines.loading import DeviceError

        raise DeviceError(
            f"{CPU_BF16_ENV}={value!r} is not valid: use 0 (no bf16) or 1, or unset it"
        )
    return word in _ON


def prepacks(dtype: Any) -> bool:
    """Whether oneDNN's prepacked linear takes `dtype` weights on this CPU (a half dtype:
    never where `SPIRAL_CPU_BF16=0`)."""
    import torch

    if dtype in (torch.bfloat16, torch.float16) and _forced() is False:
        return False
    return _oneDNN_takes(dtype)


@functools.cache
def _oneDNN_takes(dtype: Any) -> bool:
    """Pack an 8x8 weight for 2 rows and multiply with it; True when the product is
    `F.linear`'s to the dtype's rounding. Any refusal (an unsupported ISA, a build without
    oneDNN or without the op) is a no."""
    import torch
    import torch.nn.functional as F

    if not torch.backends.mkldnn.is_available():
        return False
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(8, 8, generator=gen).to(dtype)
    x = torch.randn(2, 8, generator=gen).to(dtype)
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, 2)
        out = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    except Exception:  # noqa: BLE001 - any refusal by torch or oneDNN means "not here"
        return False
    want = F.linear(x.float(), weight.float())
    return bool(torch.allclose(out.float(), want, atol=0.1, rtol=0.05))


def native_bf16() -> bool:
    """Whether bf16 products are faster than fp32 on this CPU (see the module's text).
    `SPIRAL_CPU_BF16=1` lets an explicit half dtype run emulated; it never makes `auto`
    pick one the CPU would emulate."""
    if _forced() is False:
        return False
    return _native_bf16()


@functools.cache
def _native_bf16() -> bool:
    import torch

    if not _oneDNN_takes(torch.bfloat16):
        return False
    if platform.machine().lower() in ("aarch64", "arm64"):
        return True  # oneDNN takes bf16 on Arm only with the BF16 extension
    cpu = getattr(torch, "cpu", None)
    asks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in asks)


def emulated(dtype: Any) -> bool:
    """Whether torch would emulate `dtype`'s products on this CPU (a half dtype that
    oneDNN does not take), unless `SPIRAL_CPU_BF16=1` asks to run it anyway."""
    import torch

    if dtype not in (torch.bfloat16, torch.float16) or _forced() is True:
        return False
    return not prepacks(dtype)


_NEEDS = {
    "bfloat16": "AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT",
    "float16": "AVX512-FP16 or AVX-NE-CONVERT",
}


def emulated_message(name: str) -> str:
    """The one line that refuses `dtype=name` where `emulated` says so."""
    why = (
        f"{CPU_BF16_ENV}={os.environ.get(CPU_BF16_ENV, '').strip()} makes this a CPU without half-precision kernels"
        if _forced() is False
        else f"this CPU has no {name} matrix kernels (oneDNN needs {_NEEDS[name]})"
    )
    return (
        f"dtype={name}: {why}, so torch would emulate it ~100x slower than float32; use "
        f"dtype=auto or float32 ({CPU_BF16_ENV}=1 runs it emulated anyway)"
    )


def describe() -> str:
    """One line on what the probe found, for logs and `spiral bench`."""
    import torch

    forced = _forced()
    parts = [
        f"bf16 {'native' if native_bf16() else 'not native'}",
        f"oneDNN takes bf16 {'yes' if prepacks(torch.bfloat16) else 'no'}",
        f"fp16 {'yes' if prepacks(torch.float16) else 'no'}",
    ]
    if forced is not None:
        parts.append(f"{CPU_BF16_ENV}={os.environ.get(CPU_BF16_ENV)}")
    return ", ".join(parts)
