"""The CPU probe (`engines/torch/cpu.py`): its answers are torch's own, `ASSUME` forces
them off for tests, a half dtype this CPU would only emulate is refused in one line, and the packed
decode step takes oneDNN's prepacked linear only where oneDNN takes the dtype, with the
model's own logits either way."""

from __future__ import annotations

import os

import pytest
import torch

from spiral.engines.loading import DeviceError, resolve_dtype
from spiral.engines.torch import cpu
from spiral.engines.torch.decode import _packer

CPU = torch.device("cpu")


def _unforced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu, "ASSUME", None)


def test_the_probe_agrees_with_torchs_own_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16 and fp16 prepacking as torch's oneDNN checks say (they follow
    ONEDNN_MAX_CPU_ISA, so a capped run answers as the capped CPU); fp32 wherever torch
    has oneDNN; native bf16 only where oneDNN takes bf16 at all."""
    _unforced(monkeypatch)
    mkldnn = torch.backends.mkldnn.is_available()
    assert cpu.prepacks(torch.float32) == mkldnn
    if mkldnn:
        assert cpu.prepacks(torch.bfloat16) == torch.ops.mkldnn._is_mkldnn_bf16_supported()
        assert cpu.prepacks(torch.float16) == torch.ops.mkldnn._is_mkldnn_fp16_supported()
    assert not cpu.native_bf16() or cpu.prepacks(torch.bfloat16)
    assert cpu.emulated(torch.bfloat16) == (not cpu.prepacks(torch.bfloat16))
    assert not cpu.emulated(torch.float32)
    line = cpu.describe()
    assert "\n" not in line and "bf16" in line


def test_switched_off_this_is_a_cpu_without_half_precision(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cpu, "ASSUME", False)
    assert not cpu.native_bf16()
    assert not cpu.prepacks(torch.bfloat16) and not cpu.prepacks(torch.float16)
    assert cpu.prepacks(torch.float32) == torch.backends.mkldnn.is_available()
    assert resolve_dtype("auto", CPU) == torch.float32
    for name in ("bfloat16", "float16"):
        with pytest.raises(DeviceError) as refused:
            resolve_dtype(name, CPU)
        message = str(refused.value)
        assert "\n" not in message
        assert f"dtype={name}" in message and "float32" in message
    assert resolve_dtype("float32", CPU) == torch.float32


def test_switched_on_half_dtypes_run_and_auto_still_follows_the_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cpu, "ASSUME", True)
    # "1" lets a half dtype asked for by name run emulated; auto never picks an emulated one.
    native = cpu._native_bf16()
    assert cpu.native_bf16() == native
    assert resolve_dtype("auto", CPU) == (torch.bfloat16 if native else torch.float32)
    assert resolve_dtype("auto", CPU, full_fine_tuning=True) == torch.float32
    assert resolve_dtype("bfloat16", CPU) == torch.bfloat16
    assert resolve_dtype("float16", CPU) == torch.float16
    # Prepacking is never forced on: it stays what oneDNN takes.
    assert cpu.prepacks(torch.bfloat16) == cpu._oneDNN_takes(torch.bfloat16)


def test_a_cuda_dtype_is_never_refused_by_the_cpu_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu, "ASSUME", False)
    assert resolve_dtype("bfloat16", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16


def _kind(pack_linear: object) -> str:
    return "prepacked" if ".packed." in getattr(pack_linear, "__qualname__", "") else "plain"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_packer_prepacks_only_what_onednn_takes(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    weight = torch.randn(24, 16, generator=torch.Generator().manual_seed(1)).to(dtype)
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(2)).to(dtype)
    want = torch.nn.functional.linear(x.float(), weight.float())
    for assumed in (True, False):
        monkeypatch.setattr(cpu, "ASSUME", assumed)
        linear = _packer(CPU, dtype, rows=3)(weight, None)
        assert _kind(linear) == ("prepacked" if cpu.prepacks(dtype) else "plain")
        tol = 1e-4 if dtype == torch.float32 else 0.1
        assert torch.allclose(linear(x).float(), want, atol=tol, rtol=tol)
    if dtype == torch.bfloat16:
        assert _kind(linear) == "plain"  # switched off: the fallback, on every CPU


@pytest.mark.skipif(
    os.environ.get("ATEN_CPU_CAPABILITY", "").upper() != "AVX2",
    reason="checks the capped pass (make test-capped) only",
)
def test_the_cap_makes_this_a_cpu_without_bf16() -> None:
    """Under `make test-capped` the cap really holds: torch's kernels at AVX2, oneDNN
    refusing bf16 as an AVX2 CPU does, so the suite there runs the fallbacks."""
    assert torch.backends.cpu.get_cpu_capability() == "AVX2"
    assert not torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert not cpu._oneDNN_takes(torch.bfloat16)
    assert not cpu.native_bf16()


def test_a_run_trained_in_a_dtype_this_cpu_emulates_loads_in_fp32(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from spiral.agents.model_agent import inherited_dtype

    monkeypatch.setattr(cpu, "ASSUME", False)  # a CPU without bf16 kernels
    assert inherited_dtype("bfloat16", "cpu") == "float32"
    assert "loading it in float32" in capsys.readouterr().err
    assert inherited_dtype("float32", "cpu") == "float32"
    assert inherited_dtype("auto", "cpu") == "auto"
