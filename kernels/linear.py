"""Dense projection kernels: y = x W^T + b with the weight laid out once for fast reads.

- `matmul`: the weight stored transposed and contiguous, w_t [in, out], applied as
  `x @ w_t` (on this CPU ~1.6-2x F.linear's bandwidth for a 1-row input). Any device.
- `onednn`: CPU only; the weight pre-packed once by oneDNN. MKL's sgemm repacks the weight
  on every call with 2-16 rows, so there a K+1-token verify costs 1.5-2.5x a 1-token step;
  packed, it costs about the same as one token. Each row's result is also independent of
  how many rows share the call. It adds ~20 us of fixed cost per call, so on one thread a
  1-token step is ~20% slower than `matmul` (with two threads it is faster).
"""

from __future__ import annotations

import torch

from ssdbench.errors import UsageError

LINEAR_KERNELS = ("auto", "onednn", "matmul")
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


def dense_linear_class(kernel: str, device, dtype: torch.dtype) -> type[MatmulLinear]:
    """The dense kernel: "auto" is oneDNN on CPU (fp32/bf16) where torch has it, else matmul."""
    if kernel not in LINEAR_KERNELS:
        raise UsageError(f"unknown linear kernel {kernel!r}: known: {', '.join(LINEAR_KERNELS)}")
    onednn_ok = (torch.device(device).type == "cpu" and torch.backends.mkldnn.is_available()
                 and dtype in (torch.float32, torch.bfloat16))
    if kernel == "onednn" and not onednn_ok:
        raise UsageError(f"linear kernel 'onednn' needs a CPU with oneDNN and fp32/bf16, not {device} {dtype}")
    return OnednnLinear if kernel != "matmul" and onednn_ok else MatmulLinear
