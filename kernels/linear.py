"""Dense projection kernels: y = x W^T + b with the weight laid out once for fast reads.

- `matmul`: the weight stored transposed and contiguous, w_t [in, out], applied as
  `x @ w_t` (faster than F.linear for a 1-row input on the CPUs measured). Any device.
- `gemv`: CPU, float32 only; gemv.c compiled for this CPU on first use: each weight row is
  streamed once per call as a dot product, which for one row reaches far more of the read
  bandwidth than either library kernel (a decode step is memory-bound). Absent when there is
  no C compiler.
- `packed_f32`: CPU, float32 only; packed_f32.c: the weight packed once with 16 outputs across each
  vector line, rows in register tiles sharing each load and no sums across lanes: a verify's few rows
  at little more than one row's cost. Absent without a C compiler.
- `onednn`: CPU only; the weight pre-packed once by oneDNN. MKL's sgemm repacks the weight
  on every call with 2-16 rows, so there a K+1-token verify costs 1.5-2.5x a 1-token step;
  packed, it costs about the same as one token. Each row's result is also independent of
  how many rows share the call. For one row it can be much slower than `matmul` (seen ~4x
  on an AVX2 EPYC with two threads), and its bf16 path needs AVX-512 or AVX-NE-CONVERT.

Which one a model gets is decided by trying them (probe.py): `select_dense_kernel`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from ssdbench.errors import UsageError
from ssdbench.kernels import probe
from ssdbench.kernels.gemv import GemvLinear, PackedF32Linear, gemv_unavailable_reason, library_failed

LINEAR_KERNELS = ("auto", "onednn", "gemv", "packed_f32", "matmul")
DENSE_CANDIDATES = ("onednn", "gemv", "packed_f32", "matmul")  # probe order: a near-tie goes to the earlier one
LIBRARY_KERNELS = ("gemv", "packed_f32")  # built from our C sources on first use: a failed build is not a lasting choice
FUSABLE = ("gemv", "packed_f32")  # the dense kernels decode_layer.c runs (float32 on a CPU)
ONEDNN_BATCH_HINT = 8  # the packed layout is tuned for ~8 rows yet runs any row count at one cost


class MatmulLinear:
    """y = x @ w_t (+ b), the weight stored transposed and contiguous, w_t [in, out]: any device."""

    name = "matmul"

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, *, device, dtype) -> None:
        self.w_t = weight.to(device=device, dtype=dtype).t().contiguous()  # [in, out]
        self.bias = None if bias is None else bias.to(device=device, dtype=dtype)  # [out]
        self.num_bytes = (weight.numel() + (0 if bias is None else bias.numel())) * dtype.itemsize

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        y = x @ self.w_t
        if self.bias is not None:
            y += self.bias
        return y

    def nbytes(self) -> int:
        return self.num_bytes


class OnednnLinear(MatmulLinear):
    """CPU: the weight [out, in] pre-packed once by oneDNN (see the module docstring)."""

    name = "onednn"

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, *, device, dtype) -> None:
        w = weight.to(dtype=dtype).contiguous()  # [out, in]
        self.packed = torch.ops.mkldnn._reorder_linear_weight(w, ONEDNN_BATCH_HINT)  # opaque, [out, in]
        self._op = torch.ops.mkldnn._linear_pointwise.default  # the overload itself: ~5 us less per call
        self.bias = None if bias is None else bias.to(dtype=dtype)  # [out]
        self.num_bytes = (weight.numel() + (0 if bias is None else bias.numel())) * dtype.itemsize

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        return self._op(x, self.packed, self.bias, "none", [], "")


KERNEL_CLASSES = {"matmul": MatmulLinear, "onednn": OnednnLinear, "gemv": GemvLinear, "packed_f32": PackedF32Linear}


class RowSplitLinear:
    """One weight in two layouts: `few` serves calls of fewer than `split_rows` rows, `many` the rest.

    Reads per call are one layout's bytes, so `nbytes` is one layout's; memory holds both.
    """

    def __init__(self, few: MatmulLinear, many: MatmulLinear, split_rows: int) -> None:
        self.few, self.many, self.split_rows = few, many, split_rows
        self.name = f"{few.name}<{split_rows}rows<={many.name}"

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        rows = x.numel() // x.shape[-1]
        return (self.few if rows < self.split_rows else self.many)(x)

    def nbytes(self) -> int:
        return self.few.nbytes()


def onednn_unavailable_reason(device, dtype: torch.dtype) -> str | None:
    """Why oneDNN's packed kernel cannot even be tried here (None: it can be tried)."""
    if torch.device(device).type != "cpu":
        return f"needs a CPU, not {device}"
    if not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN"
    if dtype not in (torch.float32, torch.bfloat16):
        return f"takes float32 or bfloat16, not {str(dtype).removeprefix('torch.')}"
    return None


def select_dense_kernel(kernel: str, device, dtype: torch.dtype, *, shapes: Sequence[tuple[int, int]],
                        allow_split: bool = True, disabled: frozenset[str] = frozenset(),
                        cache_path: Path | None = None, fuses: bool = False) -> probe.DenseChoice:
    """The dense kernel(s) for these projection shapes [(in, out), ...]: `kernel` if named, else probed.

    A named kernel that does not work here is a UsageError naming why. "auto" tries every
    candidate not in `disabled` and keeps the fastest working one per row count (two layouts
    only if `allow_split`); with `cache_path` the choice is reused on later runs of this machine.
    `fuses`: the model runs decode_layer.c's fused step where its kernels allow (a float32 model on a
    CPU), so FUSABLE kernels get the probe's fused credit, as the int8 kernels do.
    """
    if kernel not in LINEAR_KERNELS:
        raise UsageError(f"unknown linear kernel {kernel!r}: known: {', '.join(LINEAR_KERNELS)}")
    candidates = [kernel] if kernel != "auto" else [k for k in DENSE_CANDIDATES if k not in disabled]
    if kernel != "auto":
        cache_path = None  # a named kernel is not a probed choice
    key = (probe.cache_key(device, dtype, shapes, candidates) + f"|split={allow_split}|fuses={fuses}"
           if cache_path else "")
    def usable(name: str) -> bool:
        return name in candidates and _unavailable_reason(name, device, dtype) is None

    if cache_path is not None and (cached := probe.read_cached(cache_path, key, usable=usable)) is not None:
        return cached
    trials = [_check(name, device, dtype) for name in candidates]
    if kernel != "auto" and not trials[0].works:
        raise UsageError(f"linear kernel {kernel!r} does not work for {str(dtype).removeprefix('torch.')} on "
                         f"{device}: {trials[0].reason}; use --linear-kernel auto")
    fusable = [t.kernel for t in trials if t.works and t.kernel in FUSABLE] if fuses else []
    choice = probe.time_and_choose(trials, lambda name: _factory(name, device, dtype), shapes, device=device,
                                   dtype=dtype, fused_kernels=fusable or None)
    if not allow_split and choice.few != choice.many:
        choice = probe.DenseChoice(choice.many, choice.many, choice.split_rows, choice.trials)
    if cache_path is not None and not library_failed(trials, LIBRARY_KERNELS):
        probe.write_cached(cache_path, key, choice)
    return choice


def make_dense(choice: probe.DenseChoice, weight: torch.Tensor, bias: torch.Tensor | None, *, device, dtype):
    """A linear over weight [out, in] (and bias [out]) laid out as `choice` says."""
    many = KERNEL_CLASSES[choice.many](weight, bias, device=device, dtype=dtype)
    if choice.few == choice.many:
        return many
    few = KERNEL_CLASSES[choice.few](weight, bias, device=device, dtype=dtype)
    return RowSplitLinear(few, many, choice.split_rows)


def _factory(name: str, device, dtype: torch.dtype):
    return lambda w, b: KERNEL_CLASSES[name](w, b, device=device, dtype=dtype)


def _check(name: str, device, dtype: torch.dtype) -> probe.KernelTrial:
    if (reason := _unavailable_reason(name, device, dtype)) is not None:
        return probe.KernelTrial(name, works=False, reason=reason)
    return probe.check_kernel(name, _factory(name, device, dtype), device=device, dtype=dtype)


def _unavailable_reason(name: str, device, dtype: torch.dtype) -> str | None:
    unavailable = {"onednn": onednn_unavailable_reason, "gemv": gemv_unavailable_reason,
                   "packed_f32": gemv_unavailable_reason}.get(name)
    return None if unavailable is None else unavailable(device, dtype)
