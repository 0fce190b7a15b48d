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

To run any machine as the commonest CPUs do (AVX2, no bf16 kernels), cap torch and oneDNN
with their own settings, `ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`: both
questions are asked of torch, so they answer as the capped CPU (`make test-capped`).

`ASSUME` is for tests in one process: `False` answers as a CPU without half-precision
kernels whatever this one has (no bf16 or fp16 prepacking, `auto` is fp32, an explicit half
dtype refused); `True` lets an explicit half dtype run where torch emulates it (exact, and
fast enough for tiny models), `auto` still following the CPU. Prepacking is never forced
on: it is what oneDNN takes.
"""

from __future__ import annotations

import functools
import platform
from typing import Any

ASSUME: bool | None = None  # tests only: see the module's text; None asks this CPU


def prepacks(dtype: Any) -> bool:
    """Whether oneDNN's prepacked linear takes `dtype` weights on this CPU (a half dtype:
    never where `ASSUME` is False)."""
    import torch

    if dtype in (torch.bfloat16, torch.float16) and ASSUME is False:
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
    `ASSUME = True` lets an explicit half dtype run emulated; it never makes `auto` pick
    one the CPU would emulate."""
    if ASSUME is False:
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
    oneDNN does not take), unless `ASSUME` is True (tests)."""
    import torch

    if dtype not in (torch.bfloat16, torch.float16) or ASSUME is True:
        return False
    return not prepacks(dtype)


_NEEDS = {
    "bfloat16": "AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT",
    "float16": "AVX512-FP16 or AVX-NE-CONVERT",
}


def emulated_message(name: str) -> str:
    """The one line that refuses `dtype=name` where `emulated` says so."""
    why = (
        "this CPU runs as one without half-precision kernels"
        if ASSUME is False
        else f"this CPU has no {name} matrix kernels (oneDNN needs {_NEEDS[name]})"
    )
    return (
        f"dtype={name}: {why}, so torch would emulate it ~100x slower than float32; use "
        "dtype=auto or float32"
    )


def describe() -> str:
    """One line on what the probe found, for logs and `spiral bench`."""
    import torch

    parts = [
        f"bf16 {'native' if native_bf16() else 'not native'}",
        f"oneDNN takes bf16 {'yes' if prepacks(torch.bfloat16) else 'no'}",
        f"fp16 {'yes' if prepacks(torch.float16) else 'no'}",
    ]
    if ASSUME is not None:
        parts.append(f"assumed {'emulated half dtypes allowed' if ASSUME else 'no half kernels'}")
    return ", ".join(parts)
