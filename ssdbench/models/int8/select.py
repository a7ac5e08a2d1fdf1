"""Which int8 kernel a draft gets: each candidate checked on a tiny input, the working ones timed (the dense
probe's rounds, kernels/probe.py), or the one `--int8-kernel` pins; and the linear built on the choice."""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from ssdbench.errors import UsageError
from ssdbench.kernels import probe
from ssdbench.kernels.gemv import (gemv_i8_unavailable_reason, library_failed, tiles_i8_unavailable_reason,
                                   vnni_i8_unavailable_reason)
from ssdbench.kernels.linear import RowSplitLinear
from ssdbench.models.int8.dynamic import (INT8_BF16, INT8_FBGEMM, INT8_ONEDNN, Int8Bf16Linear, Int8FbgemmLinear,
                                          Int8OnednnLinear, dynamic_unavailable_reason)
from ssdbench.models.int8.quantise import quantize_int8
from ssdbench.models.int8.rows import (INT8_DEQUANT, INT8_DOT, INT8_GEMV, INT8_PACK, PACK_IN_MULTIPLE,
                                       Int8DequantLinear, Int8DotLinear, Int8GemvLinear, Int8PackLinear)
from ssdbench.models.int8.tiles import INT8_TILES, Int8TilesLinear
from ssdbench.models.int8.vnni import INT8_VNNI, Int8VnniLinear

# Probe order: a near-tie goes to the earlier. int8_dot before int8_gemv: the linears' timings put
# them within 10% of each other, yet whole fused steps are ~13% faster with int8_dot (SmolLM2-135M's
# draft step on one Intel Xeon core, step_costs.py: 17.6 ms against 20.2), and its int8 activations
# (blocks of 32, llama.cpp's Q8_0 format) cost the draft little: greedy agreement with the target 98.0%
# against 98.6% with float activations (measured as in int8_dynamic.py). The dequantising
# kernel is slow for a decode step but a plain GEMM for a prefill, where it may win.
# int8_tiles and int8_vnni before int8_dot: both read the weights once for all of a call's rows, and
# a tie between them goes to the AMX tiles where a CPU has them.
INT8_CANDIDATES = (INT8_TILES, INT8_VNNI, INT8_DOT, INT8_GEMV, INT8_BF16, INT8_FBGEMM, INT8_ONEDNN, INT8_PACK,
                   INT8_DEQUANT)
SECOND_LAYOUT = (INT8_TILES, INT8_VNNI, INT8_BF16, INT8_FBGEMM, INT8_ONEDNN)  # keep their own packed copy
FUSABLE = (INT8_GEMV, INT8_DOT, INT8_TILES, INT8_VNNI)  # kernels decode_layer.c runs: preferred for few rows
LIBRARY_KERNELS = (INT8_GEMV, INT8_DOT, INT8_TILES, INT8_VNNI)  # built from our C sources (kernels/gemv.py)
INT8_TOLERANCE = 0.05  # the probe's check is against unquantised weights: int8 rounding is not an error


@functools.lru_cache(maxsize=None)
def _int8pack_works(device_type: str) -> bool:
    if not hasattr(torch, "_weight_int8pack_mm"):
        return False
    try:
        x = torch.ones(1, 32, dtype=torch.bfloat16, device=device_type)  # [1, in]
        w = torch.ones(32, 32, dtype=torch.int8, device=device_type)  # [out, in]
        s = torch.ones(32, dtype=torch.bfloat16, device=device_type)  # [out]
        torch._weight_int8pack_mm(x, w, s)
        return True
    except (RuntimeError, NotImplementedError):
        return False



def _int8_unavailable_reason(name: str, device, shapes: tuple[tuple[int, int], ...]) -> str | None:
    if name in (INT8_GEMV, INT8_DOT):
        return gemv_i8_unavailable_reason(device)
    if name == INT8_TILES:
        return tiles_i8_unavailable_reason(device)
    if name == INT8_VNNI:
        return vnni_i8_unavailable_reason(device)
    if name in SECOND_LAYOUT:
        return dynamic_unavailable_reason(name, torch.device(device).type)
    if name == INT8_DEQUANT:
        return None
    if not _int8pack_works(torch.device(device).type):
        return "torch._weight_int8pack_mm is missing or refuses this device"
    if odd := sorted({i for i, _ in shapes if i % PACK_IN_MULTIPLE}):
        return f"torch._weight_int8pack_mm needs input widths that are multiples of {PACK_IN_MULTIPLE}, not {odd}"
    return None


@functools.cache
def select_int8_kernel(device, dtype: torch.dtype, *, shapes: tuple[tuple[int, int], ...],
                       disabled: frozenset[str] = frozenset(), cache_path: Path | None = None,
                       kernel: str = "auto") -> probe.DenseChoice:
    """The int8 kernel(s) for these projection shapes [(in, out), ...] and activation dtype.

    `kernel` names one to pin (a UsageError says why when it cannot run here: `--int8-kernel`), or
    "auto": each candidate not in `disabled` is checked on a tiny input, the working ones timed (the dense
    probe's rounds); INT8_DEQUANT when none works. Remembered for this process (the native draft
    and hf-assisted's copy of it get the same kernel) and, with `cache_path`, for this machine.
    """
    if kernel != "auto":
        return _pinned(kernel, device, dtype, shapes)
    candidates = [k for k in INT8_CANDIDATES if k not in disabled]
    key = probe.cache_key(device, dtype, shapes, ["int8", *candidates]) if cache_path else ""
    def usable(name: str) -> bool:
        return name in candidates and _int8_unavailable_reason(name, device, shapes) is None

    if cache_path is not None and (cached := probe.read_cached(cache_path, key, usable=usable)) is not None:
        return cached
    trials = [_check(name, device, dtype, shapes) for name in candidates]
    if not any(t.works for t in trials):  # the fallback works everywhere; only forcing it off gets here
        return probe.DenseChoice(INT8_DEQUANT, INT8_DEQUANT, 1, tuple(trials))
    fusable = [t.kernel for t in trials if t.works and t.kernel in FUSABLE]
    choice = probe.time_and_choose(trials, lambda name: _factory(name, device), shapes, device=device, dtype=dtype,
                                   fused_kernels=fusable or None)
    if cache_path is not None and not library_failed(trials, LIBRARY_KERNELS):
        probe.write_cached(cache_path, key, choice)
    return choice


def _pinned(kernel: str, device, dtype: torch.dtype, shapes: tuple[tuple[int, int], ...]) -> probe.DenseChoice:
    """The one kernel `--int8-kernel` names, for every row count, once it has passed the probe's check here."""
    if kernel not in INT8_CANDIDATES:
        raise UsageError(f"unknown int8 kernel {kernel!r}: known: auto, {', '.join(INT8_CANDIDATES)}")
    trial = _check(kernel, device, dtype, shapes)
    if not trial.works:
        raise UsageError(f"int8 kernel {kernel!r} cannot run here: {trial.reason}; use --int8-kernel auto")
    return probe.DenseChoice(kernel, kernel, 1, (trial,))


def _check(name: str, device, dtype: torch.dtype, shapes: tuple[tuple[int, int], ...]) -> probe.KernelTrial:
    if (reason := _int8_unavailable_reason(name, device, shapes)) is not None:
        return probe.KernelTrial(name, works=False, reason=reason)
    return probe.check_kernel(name, _factory(name, device), device=device, dtype=dtype, tolerance=INT8_TOLERANCE)


def _factory(name: str, device):
    return lambda w, b: INT8_CLASSES[name](w, b, device=device)


INT8_CLASSES = {INT8_GEMV: Int8GemvLinear, INT8_DOT: Int8DotLinear, INT8_TILES: Int8TilesLinear,
                INT8_VNNI: Int8VnniLinear,
                INT8_FBGEMM: Int8FbgemmLinear, INT8_ONEDNN: Int8OnednnLinear, INT8_BF16: Int8Bf16Linear,
                INT8_PACK: Int8PackLinear, INT8_DEQUANT: Int8DequantLinear}


def make_int8_linear(weight: torch.Tensor, bias: torch.Tensor | None, *, device, choice: probe.DenseChoice):
    """An int8 linear over weight [out, in] (and bias [out]) on the kernel(s) `choice` names; one
    quantised copy serves both kernels of a row split."""
    quantized = quantize_int8(weight)
    many = INT8_CLASSES[choice.many](weight, bias, device=device, quantized=quantized)
    if choice.few == choice.many:
        return many
    return RowSplitLinear(INT8_CLASSES[choice.few](weight, bias, device=device, quantized=quantized), many,
                          choice.split_rows)
