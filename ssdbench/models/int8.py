"""Weight-only int8 linears for the self-draft: per-output-channel symmetric quantisation.

On CPU the kernel is `torch._weight_int8pack_mm` (int8 weights [out, in], bf16 scales,
bf16 activations), which reads a quarter of fp32's bytes. Where that op is missing or
refuses the device (CUDA builds may lack it), `Int8DequantLinear` is used instead: the
same int8 weights and scales, dequantised to the activation dtype on every call —
faithful to the quantised values but not faster than a dense layer. `int8_kernel_name`
says which one a model got.
"""

from __future__ import annotations

import functools

import torch

INT8_PACK = "int8pack_mm"
INT8_DEQUANT = "int8_dequant"


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


def int8_kernel_name(device: torch.device | str, *, disabled: frozenset[str] = frozenset()) -> str:
    """INT8_PACK where `torch._weight_int8pack_mm` runs on this device (and is not disabled), else INT8_DEQUANT."""
    usable = INT8_PACK not in disabled and _int8pack_works(torch.device(device).type)
    return INT8_PACK if usable else INT8_DEQUANT


class Int8PackLinear:
    """y = x @ dequant(w)^T + b through `_weight_int8pack_mm`; bf16 inside, x's dtype out."""

    name = INT8_PACK

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, *, device) -> None:
        q, scales = quantize_int8(weight)
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


class Int8DequantLinear(Int8PackLinear):
    """Fallback with the same quantised values: dequantise to x's dtype, then a dense matmul."""

    name = INT8_DEQUANT

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        w = self.w_int8.to(x.dtype) * self.scales.to(x.dtype)[:, None]  # [out, in]
        y = torch.nn.functional.linear(x, w)  # [..., out]
        return y if self.bias is None else y + self.bias.to(x.dtype)


def make_int8_linear(weight: torch.Tensor, bias: torch.Tensor | None, *, device,
                     kernel: str | None = None) -> Int8PackLinear:
    """An int8 linear on `kernel`, by default the fastest faithful one this device runs (`int8_kernel_name`)."""
    kernel = kernel or int8_kernel_name(device)
    cls = Int8PackLinear if kernel == INT8_PACK else Int8DequantLinear
    return cls(weight, bias, device=device)
