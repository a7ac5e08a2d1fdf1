"""The physical floor of a forward step on this CPU: its weight bytes over the read bandwidth measured
here, or its multiply-adds over the core's measured peak for the kernel's instructions, whichever is
larger. benchmarks/step_costs.py prints each step's ratio to it.

Both rates are measured, not taken from a datasheet: the bandwidth by reading a buffer as large as
the weights (so it is the bandwidth a step sees, from DRAM or from a cache that holds them all), the
peak by a loop of independent vector instructions on registers (kernels/gemv.c, kernels/vnni_i8.c).
Attention's multiply-adds (scores and value mixing, float32) may be added at the f32 peak: a tree step's
16 rows over a 200-token context do a fifth as many of them as its projections do int8 ones, at a quarter
of the rate. Norms and the KV cache's reads are left out.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from ssdbench.kernels.gemv import VNNI_PATHS, library

PEAK_ITERATIONS = 2_000_000
# The instructions each kernel multiplies with, for its compute floor; kernels not listed (the library's
# int8 GEMMs: bf16, fbgemm, onednn, ...) get the bandwidth floor alone, as their peak is not measured here.
F32_KERNELS = ("gemv", "packed_f32", "matmul", "onednn")
INT8_DOT_KERNELS = ("int8_vnni", "int8_dot")  # both take vnni_i8.c's peak: dot_i8.c's ymm dpbusd may be
# half as wide on an AVX-512 core, so its floor is a lower bound there
TILE_DIGITS = 2  # int8_tiles multiplies each input row as two 8-bit digits: twice the multiply-adds


@dataclass(frozen=True)
class Rates:
    """What bounds a step here: read bandwidth (bytes/s) and multiply-adds per second per instruction kind."""

    read_bytes_per_s: float
    f32_macs_per_s: float
    int8_macs_per_s: float
    int8_path: str  # the instruction path int8_macs_per_s was measured on (kernels/vnni_i8.c)
    tiles_macs_per_s: float = 0.0  # AMX's (0: no tiles here)

    def floor_ms(self, weight_bytes: int, macs: int, kernel: str, *, attention_macs: int = 0) -> tuple[float, str]:
        """(floor ms, what sets it: 'bandwidth' or 'compute') for a step reading `weight_bytes` and doing `macs`
        in its projections on `kernel`, and `attention_macs` float32 multiply-adds in its attention."""
        memory = weight_bytes / self.read_bytes_per_s * 1e3
        peak = (self.f32_macs_per_s if kernel in F32_KERNELS
                else self.int8_macs_per_s if kernel in INT8_DOT_KERNELS
                else self.tiles_macs_per_s / TILE_DIGITS if kernel == "int8_tiles" else None)
        compute = macs / peak * 1e3 if peak else 0.0
        compute += attention_macs / self.f32_macs_per_s * 1e3 if peak else 0.0
        return (memory, "bandwidth") if memory >= compute else (compute, "compute")


def read_bandwidth(nbytes: int, *, repeats: int = 7) -> float:
    """Bytes per second one thread reads from a buffer of `nbytes` (kernels/gemv.c's vector read loop)."""
    read = library().ssdbench_read_f32
    buffer = torch.ones(max(1, nbytes // 4), dtype=torch.float32)
    read(buffer.data_ptr(), buffer.numel())  # warm: pages mapped, caches filled as a step finds them
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        read(buffer.data_ptr(), buffer.numel())
        times.append(time.perf_counter() - start)
    return buffer.numel() * 4 / statistics.median(times)


def _peak(call, repeats: int = 5) -> float:
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        macs = call()
        rates.append(macs / (time.perf_counter() - start))
    return max(rates)  # a peak: the least-disturbed run


def measure_rates(weight_bytes: int) -> Rates:
    """This core's rates, the bandwidth at a buffer of `weight_bytes`."""
    lib = library()
    f32 = _peak(lambda: lib.ssdbench_f32_peak(PEAK_ITERATIONS, 0.999))
    int8 = _peak(lambda: lib.ssdbench_vnni_i8_peak(PEAK_ITERATIONS, 3))
    tiles = _peak(lambda: lib.ssdbench_tiles_i8_peak(PEAK_ITERATIONS // 20)) if lib.ssdbench_tiles_i8_ready() else 0.0
    return Rates(read_bandwidth(weight_bytes), f32, int8, VNNI_PATHS[lib.ssdbench_vnni_i8_path()], tiles)
