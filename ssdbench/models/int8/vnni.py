"""`int8_vnni`: the int8 weights packed once more, for kernels/vnni_i8.c's row-blocked integer GEMM.

int8_dot streams every row past every weight row, so a 16-branch tree step costs it about 16 one-row
calls; int8_tiles needs AMX, which most CPUs lack. vnni_i8.c lays 16 outputs across a vector and
multiplies 4 input bytes of one row into all of them per instruction (`vpdpbusd` with AVX-512 VNNI or
AVX-VNNI; `vpmaddubsw` with AVX2 alone), a register tile of rows sharing each weight load: the
weights are read once per call, as int8, whatever the row count.

Activations are quantised as int8_dot's are (blocks of 32, one float32 scale each), so the draft's
accuracy is int8_dot's; the block sums are exact integers and the float steps are the same on every
instruction path, so a row's result depends on the row alone and the paths agree bit for bit.
The fused decode step runs it (kernels/decode_layer.c's projection kind 3), so tree steps, glue
chunks and prefills given to it skip the Python path too. Without AVX2 it is not a candidate (its plain
loops are correct and slow).
"""

from __future__ import annotations

import torch

from ssdbench.kernels.gemv import gemv_i8_unavailable_reason, vnni_i8_functions, vnni_i8_path
from ssdbench.models.int8.quantise import quantize_int8

INT8_VNNI = "int8_vnni"
VNNI_KIND = 3  # decode_layer.c's projection kind for this kernel


class Int8VnniLinear:
    """y = (q(x) . w_int8[o]) * scales[o] + b[o] through vnni_i8.c; float32 inside, x's dtype out. CPU only.
    It runs wherever the library builds (plain loops without AVX2); the probe and `--int8-kernel` take it
    only where AVX2 at least is there (models/int8.py)."""

    name = INT8_VNNI

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, *, device, quantized=None) -> None:

        if (reason := gemv_i8_unavailable_reason(device)) is not None:  # built without AVX2 it runs its plain
            raise RuntimeError(f"int8 vnni kernel unavailable: {reason}")
        packed_bytes, pack, self._fn = vnni_i8_functions()
        self.path = vnni_i8_path()
        q, scales = quantized or quantize_int8(weight)
        q = q.contiguous()  # [out, in]
        self.out_features, self.in_features = q.shape
        self.packed = torch.empty(packed_bytes(self.in_features, self.out_features), dtype=torch.uint8)  # lines
        pack(q.data_ptr(), self.packed.data_ptr(), self.in_features, self.out_features)
        self.scales = scales.float().contiguous()  # [out]
        self.bias = None if bias is None else bias.float().contiguous()  # [out]
        self._bias_ptr = None if self.bias is None else self.bias.data_ptr()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        if x.shape[-1] != self.in_features:
            raise ValueError(f"int8 vnni: an input of {x.shape[-1]} features for a weight of {self.in_features}")
        if x.dtype != torch.float32:
            return self(x.float()).to(x.dtype)
        x = x.contiguous()
        y = torch.empty(*x.shape[:-1], self.out_features, dtype=torch.float32)  # [..., out]
        status = self._fn(x.data_ptr(), self.packed.data_ptr(), self.scales.data_ptr(), self._bias_ptr, y.data_ptr(),
                          x.numel() // self.in_features, self.in_features, self.out_features, torch.get_num_threads())
        if status != 0:
            raise MemoryError("vnni_i8.c could not allocate its scratch memory")
        return y

    @property
    def gemv_pointers(self) -> tuple:
        """(packed weights, scales, bias, in, out, 3: vnni_i8.c) for kernels/decode_layer.c."""
        return (self.packed.data_ptr(), self.scales.data_ptr(), self._bias_ptr, self.in_features, self.out_features,
                VNNI_KIND)

    def nbytes(self) -> int:
        return self.packed.numel() + 4 * self.scales.numel() + (0 if self.bias is None else 4 * self.bias.numel())
