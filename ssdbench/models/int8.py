"""Weight-only int8 linears for the self-draft: per-output-channel symmetric quantisation.

Every kernel reads the same int8 weights [out, in] and per-output scales (a quarter of fp32's
bytes). Which one a model gets is decided by trying them, as for dense kernels (kernels/probe.py):
- `int8_gemv`: CPU; kernels/gemv.c widens each int8 block to float32 in registers, float32
  activations and scales. Absent without a C compiler.
- `int8_dot`: CPU; kernels/dot_i8.c quantises the activations too (int8 per block of 32, one
  float32 scale each, as llama.cpp's Q8_0 path does) and sums each block's products in integers:
  fewer instructions per weight than widening them. Absent without a C compiler.
- `int8_tiles` (int8_tiles.py): CPU with AMX; kernels/tiles_i8.c multiplies int8 blocks of up to 16
  rows on the tiles, the weights read once as int8 for all rows, the activations rounded per row to
  15 bits: the many-rows path (a tree step, a prefill) that the fused step also runs.
- `int8_vnni` (int8_vnni.py): CPU with AVX2 at least; kernels/vnni_i8.c packs the int8 weights once
  with 16 outputs across a vector and multiplies 4 input bytes of a row into all of them per
  `vpdpbusd` (AVX-512 VNNI, AVX-VNNI; `vpmaddubsw` on AVX2), rows in register tiles sharing each weight
  load; the activations in int8_dot's blocks of 32: the many-rows path without AMX, fused too.
- `int8_bf16`, `int8_fbgemm`, `int8_onednn` (int8_dynamic.py): the int8 values packed once more for a
  GEMM over all of a call's rows (oneDNN's bf16 GEMM; torch's quantized engines, activations in two
  8-bit digits): the path for a prefill's or a tree step's many rows, where a CPU has the units.
- `int8pack_mm`: `torch._weight_int8pack_mm`, bf16 activations and scales; missing or refused
  on some devices (CUDA builds may lack it).
- `int8_dequant`: dequantised to the activation dtype on every call, then a dense GEMM: slow for
  a decode step, but it may win a prefill's many rows; and the fallback where nothing else runs.
`select_int8_kernel` makes the choice; the manifest records it with its trials. Calls of few rows
go to a kernel the fused step (kernels/decode_layer.c) can run, where one works: fused, a one-row
step saves per-layer Python work that timing the linears alone does not see.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from ssdbench.errors import UsageError
from ssdbench.kernels import probe
from ssdbench.kernels.gemv import (dot_i8_function, gemv_i8_function, gemv_i8_unavailable_reason, library_failed,
                                   tiles_i8_unavailable_reason, vnni_i8_unavailable_reason)
from ssdbench.kernels.linear import RowSplitLinear
from ssdbench.models.int8_dynamic import (INT8_BF16, INT8_FBGEMM, INT8_ONEDNN, Int8Bf16Linear, Int8FbgemmLinear,
                                          Int8OnednnLinear, dynamic_unavailable_reason)
from ssdbench.models.int8_tiles import INT8_TILES, Int8TilesLinear
from ssdbench.models.int8_vnni import INT8_VNNI, Int8VnniLinear

INT8_GEMV = "int8_gemv"
INT8_PACK = "int8pack_mm"
INT8_DEQUANT = "int8_dequant"
INT8_DOT = "int8_dot"
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


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: weight [out, in] -> (int8 [out, in], fp32 scales [out])."""
    w = weight.float()  # [out, in]
    scales = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0  # [out]
    q = torch.round(w / scales[:, None]).clamp_(-127, 127).to(torch.int8)  # [out, in]
    return q, scales


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


PACK_IN_MULTIPLE = 16  # _weight_int8pack_mm crashes the process (SIGSEGV) on other input widths with >1 row


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


class Int8PackLinear:
    """y = x @ dequant(w)^T + b through `_weight_int8pack_mm`; bf16 inside, x's dtype out."""

    name = INT8_PACK
    in_multiple = PACK_IN_MULTIPLE  # input widths the kernel takes without crashing

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, *, device, quantized=None) -> None:
        if weight.shape[1] % self.in_multiple:
            raise ValueError(f"{self.name}: an input width of {weight.shape[1]} is not a multiple of {self.in_multiple}")
        q, scales = quantized or quantize_int8(weight)
        self.w_int8 = q.to(device)  # [out, in]
        self.scales = scales.to(device=device, dtype=torch.bfloat16)  # [out]
        self.bias = None if bias is None else bias.to(device=device, dtype=torch.bfloat16)  # [out]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        x2 = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)  # [M, in]
        y = torch._weight_int8pack_mm(x2, self.w_int8, self.scales)  # [M, out] bf16
        if self.bias is not None:
            y += self.bias
        return y.view(*x.shape[:-1], -1).to(x.dtype)

    def nbytes(self) -> int:
        return self.w_int8.numel() + 2 * self.scales.numel() + (0 if self.bias is None else 2 * self.bias.numel())


WIDENED_BLOCK_BYTES = 256 * 1024  # a block of widened weight rows that stays in a core's L2 while every row uses it


class Int8DequantLinear:
    """The same quantised values through a dense GEMM, one block of output channels at a time: each
    block is widened to x's dtype once for all of x's rows, while it is still in cache, then
    multiplied. The GEMM-shaped path for a prefill's many rows (where a row-streaming int8 kernel
    pays its per-weight instructions once per row), and the fallback where nothing else runs.
    Scales stay float32: the widened weights equal int8_gemv's."""

    name = INT8_DEQUANT
    in_multiple = 1  # a plain dense matmul: any width

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, *, device, quantized=None) -> None:
        q, scales = quantized or quantize_int8(weight)
        self.w_int8 = q.to(device)  # [out, in]
        self.scales = scales.to(device=device, dtype=torch.float32)  # [out]
        self.bias = None if bias is None else bias.to(device=device, dtype=torch.float32)  # [out]
        out_features, in_features = self.w_int8.shape
        self.block = max(16, WIDENED_BLOCK_BYTES // (4 * in_features))  # output channels per widened block

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        x2 = x.reshape(-1, x.shape[-1])  # [M, in]
        y = torch.empty(x2.shape[0], self.w_int8.shape[0], dtype=x.dtype, device=x.device)  # [M, out]
        for lo in range(0, self.w_int8.shape[0], self.block):
            hi = lo + self.block
            w = self.w_int8[lo:hi].to(x.dtype).mul_(self.scales[lo:hi, None].to(x.dtype))  # [block, in]
            y[:, lo:hi] = x2 @ w.t()  # [M, block]
        if self.bias is not None:
            y += self.bias.to(x.dtype)
        return y.view(*x.shape[:-1], -1)

    def nbytes(self) -> int:
        return self.w_int8.numel() + 4 * self.scales.numel() + (0 if self.bias is None else 4 * self.bias.numel())


class Int8GemvLinear:
    """y = (x . w_int8[o]) * scales[o] + b[o] through gemv.c; float32 inside, x's dtype out. CPU only."""

    name = INT8_GEMV

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, *, device, quantized=None) -> None:
        if (reason := gemv_i8_unavailable_reason(device)) is not None:
            raise RuntimeError(f"int8 gemv kernel unavailable: {reason}")
        self._fn = gemv_i8_function()
        q, scales = quantized or quantize_int8(weight)
        self.w_int8 = q.contiguous()  # [out, in]
        self.scales = scales.float().contiguous()  # [out]
        self.bias = None if bias is None else bias.float().contiguous()  # [out]
        self._bias_ptr = None if self.bias is None else self.bias.data_ptr()
        self._w_ptr, self._scales_ptr = self.w_int8.data_ptr(), self.scales.data_ptr()
        self.out_features, self.in_features = self.w_int8.shape

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        if x.shape[-1] != self.in_features:
            raise ValueError(f"int8 gemv: an input of {x.shape[-1]} features for a weight of {self.in_features}")
        if x.dtype != torch.float32:  # float32 inside: the common case pays no conversions
            return self(x.float()).to(x.dtype)
        x = x.contiguous()
        y = torch.empty(*x.shape[:-1], self.out_features, dtype=torch.float32)  # [..., out]
        self._fn(x.data_ptr(), self._w_ptr, self._scales_ptr, self._bias_ptr, y.data_ptr(),
                 x.numel() // self.in_features, self.in_features, self.out_features, torch.get_num_threads())
        return y

    @property
    def gemv_pointers(self) -> tuple:
        """(weight, scales, bias, in, out) for kernels/decode_layer.c."""
        return self._w_ptr, self._scales_ptr, self._bias_ptr, self.in_features, self.out_features

    def nbytes(self) -> int:
        return self.w_int8.numel() + 4 * self.scales.numel() + (0 if self.bias is None else 4 * self.bias.numel())


class Int8DotLinear(Int8GemvLinear):
    """The same int8 weights and scales through dot_i8.c: the activations quantised per block of 32 too."""

    name = INT8_DOT

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, *, device, quantized=None) -> None:
        super().__init__(weight, bias, device=device, quantized=quantized)
        self._fn = _checked(dot_i8_function())

    @property
    def gemv_pointers(self) -> tuple:
        """(weight, scales, bias, in, out, int8 inputs) for kernels/decode_layer.c."""
        return *super().gemv_pointers, 1


def _checked(dot):
    """dot_i8.c returns -1 when it cannot have its scratch memory: raise, as an allocation would."""
    def call(*args):
        if dot(*args) != 0:
            raise MemoryError("dot_i8.c could not allocate its scratch memory")
    return call


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
