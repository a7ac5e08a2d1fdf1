"""The row kernels: int8 linears that stream a call's rows one after another (or hand them to torch),
reading the weights as quantise.py makes them."""

from __future__ import annotations

import torch

from ssdbench.kernels.gemv import dot_i8_function, gemv_i8_function, gemv_i8_unavailable_reason
from ssdbench.models.int8.quantise import quantize_int8

INT8_GEMV = "int8_gemv"
INT8_PACK = "int8pack_mm"
INT8_DEQUANT = "int8_dequant"
INT8_DOT = "int8_dot"
PACK_IN_MULTIPLE = 16  # _weight_int8pack_mm crashes the process (SIGSEGV) on other input widths with >1 row


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
