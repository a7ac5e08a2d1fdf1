"""int8 linears through torch's quantized engines: the GEMM-shaped int8 path for many rows.

The weights (per-output-channel int8, the same values as every other int8 kernel) are packed once
by an engine (`fbgemm` or `onednn`); each call quantises its activations to 8 bits with one scale
and zero point for the whole call, multiplies in integers (VNNI or AMX where the CPU has them) and
rescales to float32. A row-streaming kernel (int8_dot) pays its per-weight instructions once per
row, so a prefill of 140 rows or a 16-branch tree step costs it ~140 or ~16 one-row calls; here the
products of all rows are one integer GEMM over weights read once. Measured on one Intel Xeon core
(AVX-512, AMX), SmolLM2-135M's layer projections: 16 rows 0.35 ms against int8_dot's 1.5, 128 rows
1.0-2.0 ms against 9.4 for dequantising to float32 first.

Without VNNI, x86 multiplies 8-bit values with `maddubs`, which saturates a pair of full-range
products in 16 bits; the engines then need the activations in 7 bits ("reduce_range"). Whether a
CPU saturates is tried, not assumed from its name: one product that must not saturate, once per engine.

The activations share one scale across the call's rows, so a row's result depends slightly on the
other rows beside it. That is harmless for a draft (speculation stays exact whatever the draft
proposes, as long as the probabilities it proposed with are the ones it reports), and the probe's
accuracy check bounds the error.
"""

from __future__ import annotations

import contextlib
import functools
import warnings

import torch

INT8_FBGEMM = "int8_fbgemm"
INT8_ONEDNN = "int8_onednn"
ENGINES = {INT8_FBGEMM: "fbgemm", INT8_ONEDNN: "onednn"}


@contextlib.contextmanager
def _engine(name: str):
    """torch's quantized engine set to `name` while weights are packed (the packed weight keeps it)."""
    before = torch.backends.quantized.engine
    torch.backends.quantized.engine = name
    try:
        yield
    finally:
        torch.backends.quantized.engine = before


def _per_channel(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """int8 [out, in] and scales [out] as torch's per-channel quantized tensor (its deprecation warning
    says the quantized tensor types will leave torch one day: the probe then finds this kernel gone)."""
    zero_points = torch.zeros(scales.numel(), dtype=torch.long)  # [out]: symmetric
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch._make_per_channel_quantized_tensor(q.cpu(), scales.double().cpu(), zero_points, 0)


@functools.lru_cache(maxsize=None)
def dynamic_unavailable_reason(name: str, device_type: str) -> str | None:
    """Why the engine's dynamic int8 linear cannot be tried here (None: it can)."""
    if device_type != "cpu":
        return f"needs a CPU, not {device_type}"
    engine = ENGINES[name]
    if engine not in torch.backends.quantized.supported_engines:
        return f"this torch build has no {engine} quantized engine"
    if not hasattr(torch.ops.quantized, "linear_dynamic"):
        return "this torch build has no quantized::linear_dynamic"
    return None


@functools.lru_cache(maxsize=None)
def needs_reduced_range(name: str) -> bool:
    """Whether the engine saturates full-range 8-bit activations here: all-ones inputs and weights quantise
    to the largest values (255 x 127 per product), whose exact sum over 64 inputs is 64."""
    with _engine(ENGINES[name]):
        ones = torch.ones(4, 64)  # [out, in]
        packed = torch.ops.quantized.linear_prepack(_per_channel(*_unit_int8(ones)), None)
        got = torch.ops.quantized.linear_dynamic(torch.ones(1, 64), packed, False)  # [1, out]
    return not torch.allclose(got, torch.full_like(got, 64.0), rtol=0.02)


def _unit_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """weight [out, in] of ones as int8 127s and scales 1/127."""
    return torch.full(weight.shape, 127, dtype=torch.int8), torch.full((weight.shape[0],), 1 / 127)


class Int8DynamicLinear:
    """y = dequant(quant(x) @ w_int8^T) * scales + b, through a quantized engine's packed weight. CPU, float32 out."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, *, device, quantized=None) -> None:
        from ssdbench.models.int8 import quantize_int8

        if (reason := dynamic_unavailable_reason(self.name, torch.device(device).type)) is not None:
            raise RuntimeError(f"{self.name} unavailable: {reason}")
        q, scales = quantized or quantize_int8(weight)
        with _engine(ENGINES[self.name]):
            self.packed = torch.ops.quantized.linear_prepack(
                _per_channel(q, scales), None if bias is None else bias.float().cpu())
        self._op = torch.ops.quantized.linear_dynamic.default
        self.reduce_range = needs_reduced_range(self.name)
        self.out_features, self.in_features = q.shape
        self.num_bytes = q.numel() + 4 * scales.numel() + (0 if bias is None else 4 * bias.numel())

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        x2 = x.reshape(-1, self.in_features)  # [M, in]
        if x2.dtype != torch.float32:
            x2 = x2.float()
        y = self._op(x2.contiguous(), self.packed, self.reduce_range)  # [M, out] float32
        return y.view(*x.shape[:-1], self.out_features).to(x.dtype)

    def nbytes(self) -> int:
        return self.num_bytes


class Int8FbgemmLinear(Int8DynamicLinear):
    name = INT8_FBGEMM


class Int8OnednnLinear(Int8DynamicLinear):
    name = INT8_ONEDNN
