"""`int8_tiles`: the int8 weights packed once more, for kernels/tiles_i8.c's AMX tiles.

A row-streaming kernel (int8_dot) pays its per-weight instructions once per row, so a 16-branch
tree step costs it about 16 one-row calls, and int8_bf16's GEMM reads a two-byte copy of the
weights. On a CPU with AMX (Intel Sapphire Rapids and later) the tiles multiply int8 blocks of up to
16 rows at once: the weights are read once, as int8, and the arithmetic costs next to nothing.

Activations go in per row, rounded to 15 bits of the row's largest magnitude (held as two bytes);
the sums are exact integers, so a row's result does not depend on the rows beside it. The
decode step runs it fused (kernels/decode_layer.c), so a tree step or a prefill given to it skips
the Python path too. Where the CPU, compiler or OS has no tiles it is absent, and the probe keeps
the other candidates.
"""

from __future__ import annotations

import torch

from ssdbench.kernels.gemv import tiles_i8_functions, tiles_i8_unavailable_reason
from ssdbench.models.int8.quantise import quantize_int8

INT8_TILES = "int8_tiles"


class Int8TilesLinear:
    """y = (x_q . w_int8[o]) * scales[o] + b[o] on AMX tiles; float32 inside, x's dtype out. CPU only."""

    name = INT8_TILES

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, *, device, quantized=None) -> None:

        if (reason := tiles_i8_unavailable_reason(device)) is not None:
            raise RuntimeError(f"int8 tiles kernel unavailable: {reason}")
        packed_bytes, pack, self._fn = tiles_i8_functions()
        q, scales = quantized or quantize_int8(weight)
        q = q.contiguous()  # [out, in]
        self.out_features, self.in_features = q.shape
        self.packed = torch.empty(packed_bytes(self.in_features, self.out_features), dtype=torch.int8)  # tiles
        self.wsum = torch.empty(self.out_features, dtype=torch.int32)  # [out]
        pack(q.data_ptr(), self.packed.data_ptr(), self.wsum.data_ptr(), self.in_features, self.out_features)
        self.scales = scales.float().contiguous()  # [out]
        self.bias = None if bias is None else bias.float().contiguous()  # [out]
        self._bias_ptr = None if self.bias is None else self.bias.data_ptr()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        if x.shape[-1] != self.in_features:
            raise ValueError(f"int8 tiles: an input of {x.shape[-1]} features for a weight of {self.in_features}")
        if x.dtype != torch.float32:
            return self(x.float()).to(x.dtype)
        x = x.contiguous()
        y = torch.empty(*x.shape[:-1], self.out_features, dtype=torch.float32)  # [..., out]
        status = self._fn(x.data_ptr(), self.packed.data_ptr(), self.wsum.data_ptr(), self.scales.data_ptr(),
                          self._bias_ptr, y.data_ptr(), x.numel() // self.in_features, self.in_features,
                          self.out_features, torch.get_num_threads(), 1)
        if status == -3:
            raise RuntimeError("tiles_i8.c: AMX tiles cannot run in this process")
        if status != 0:
            raise MemoryError("tiles_i8.c could not allocate its scratch memory")
        return y

    @property
    def gemv_pointers(self) -> tuple:
        """(packed weights, scales, bias, in, out, 2: tiles_i8.c, weight sums) for kernels/decode_layer.c."""
        return (self.packed.data_ptr(), self.scales.data_ptr(), self._bias_ptr, self.in_features, self.out_features,
                2, self.wsum.data_ptr())

    def nbytes(self) -> int:
        return (self.packed.numel() + 4 * self.wsum.numel() + 4 * self.scales.numel()
                + (0 if self.bias is None else 4 * self.bias.numel()))
