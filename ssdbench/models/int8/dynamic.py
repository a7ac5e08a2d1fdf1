"""int8 linears for many rows: the int8 values packed once more, for a GEMM over all of a call's rows.

A row-streaming kernel (int8_dot) pays its per-weight instructions once per row, so a prefill of 140
rows or a 16-branch tree step costs it ~140 or ~16 one-row calls. Here one GEMM reads the weights once
for all rows and multiplies on the CPU's matrix units where it has them:
- `int8_bf16`: the int8 values widened once to bf16 and packed by oneDNN (AMX, AVX-512 BF16);
- `int8_fbgemm`, `int8_onednn`: torch's quantized engines, 8-bit products summed in integers (VNNI).
SmolLM2-135M's projections on one Intel Xeon core (AVX-512, AMX; ms per layer and lm_head at the
probe's shapes, a loaded machine): 16 rows: int8_bf16 1.9, int8_onednn 3.0, int8_dot 4.4; 128 rows:
6.6, 11.5, and 33 for dequantising to float32 first. The probe decides per machine.

The engines quantise a call's activations with one scale and zero point for all its rows, and that
alone is too coarse for a draft: a prompt's first token carries activations far larger than the
rest, and channel outliers crowd each row. Measured as the int8 draft's greedy agreement with the
target over 512 teacher-forced tokens (8 HumanEval prompts, each prefilled through the kernel):
one scale per call 89.6-90.4%, int8_dot's blocks of 32 98.0%, float32 activations 98.6%. So each
row is first divided by its largest magnitude (one scale per call then serves each row alike: 96.1%),
and the activations go in two 8-bit digits: the engine's rounding of the scaled rows, then a second
call on what that rounding missed (97.9%). Two calls cost less than one row-streaming pass at 4 rows
and more.

Without VNNI, x86 multiplies 8-bit values with `maddubs`, which saturates a pair of full-range
products in 16 bits; the engines then need the activations in 7 bits ("reduce_range"). Whether a
CPU saturates is tried, not assumed from its name: one product that must not saturate, once per engine.

A row's result still depends slightly on the rows beside it (the digits' scales span the call).
That is harmless for a draft: speculation stays exact whatever the draft proposes, as long as the
probabilities it proposed with are the ones it reports; the probe's accuracy check bounds the error.
"""

from __future__ import annotations

import contextlib
import functools
import warnings

import torch

from ssdbench.models.int8.quantise import quantize_int8

INT8_BF16 = "int8_bf16"
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
    """Why one of this module's kernels cannot be tried here (None: it can)."""
    if device_type != "cpu":
        return f"needs a CPU, not {device_type}"
    if name == INT8_BF16:  # whether this CPU runs oneDNN's bf16 GEMM is found by trying it (the probe's check)
        return None if torch.backends.mkldnn.is_available() else "this torch build has no oneDNN"
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
    """y = (x @ dequant(w_int8)^T) + b through a quantized engine's packed weight, the activations in two
    8-bit digits per row (see the module docstring). CPU, x's dtype out."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, *, device, quantized=None) -> None:

        if (reason := dynamic_unavailable_reason(self.name, torch.device(device).type)) is not None:
            raise RuntimeError(f"{self.name} unavailable: {reason}")
        q, scales = quantized or quantize_int8(weight)
        with _engine(ENGINES[self.name]):
            self.packed = torch.ops.quantized.linear_prepack(_per_channel(q, scales), None)
        self.bias = None if bias is None else bias.float().cpu()  # [out]: added after the rows' scales
        self._op = torch.ops.quantized.linear_dynamic.default
        self.reduce_range = needs_reduced_range(self.name)
        self.out_features, self.in_features = q.shape
        self.num_bytes = q.numel() + 4 * scales.numel() + (0 if bias is None else 4 * bias.numel())

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        x2 = x.reshape(-1, self.in_features).float()  # [M, in]
        top = x2.abs().amax(dim=1, keepdim=True).clamp_(min=1e-30)  # [M, 1]
        unit = x2 / top  # [M, in], each row's largest magnitude 1
        y = self._op(unit, self.packed, self.reduce_range)  # [M, out]: the first digit
        first = torch.quantize_per_tensor_dynamic(unit, torch.quint8, self.reduce_range)  # what the engine saw
        y += self._op(unit.sub_(first.dequantize()), self.packed, self.reduce_range)  # the second: what it missed
        y.mul_(top)
        if self.bias is not None:
            y += self.bias
        return y.view(*x.shape[:-1], self.out_features).to(x.dtype)

    def nbytes(self) -> int:
        return self.num_bytes


class Int8FbgemmLinear(Int8DynamicLinear):
    name = INT8_FBGEMM


class Int8OnednnLinear(Int8DynamicLinear):
    name = INT8_ONEDNN


class Int8Bf16Linear:
    """y = (bf16(x) @ w_int8^T) * scales + b: the int8 values widened once to bfloat16 (exactly: |w| <= 127
    needs 7 bits of bf16's 8) and packed by oneDNN, whose bf16 GEMM uses AMX or AVX-512 BF16 where the CPU
    has them. The activations round to bf16 (8 significant bits, each element its own exponent, so
    outliers cost the rest nothing); the products sum in float32, and the sums round once to bf16 on the
    way out (oneDNN's bf16 GEMM returns bf16). CPU only; twice the int8 weights' memory.
    Greedy agreement with the target as in the module docstring: 98.0%, as int8_dot's."""

    name = INT8_BF16

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, *, device, quantized=None) -> None:

        if (reason := dynamic_unavailable_reason(self.name, torch.device(device).type)) is not None:
            raise RuntimeError(f"{self.name} unavailable: {reason}")
        q, scales = quantized or quantize_int8(weight)
        self.packed = torch.ops.mkldnn._reorder_linear_weight(q.to(torch.bfloat16).contiguous(), 8)  # [out, in]
        self._op = torch.ops.mkldnn._linear_pointwise.default
        self.scales = scales.float().cpu()  # [out]
        self.bias = None if bias is None else bias.float().cpu()  # [out]
        self.out_features, self.in_features = q.shape
        self.num_bytes = 2 * q.numel() + 4 * scales.numel() + (0 if bias is None else 4 * bias.numel())

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        x2 = x.reshape(-1, self.in_features).to(torch.bfloat16)  # [M, in]
        y = self._op(x2, self.packed, None, "none", [], "").float().mul_(self.scales)  # [M, out]
        if self.bias is not None:
            y += self.bias
        return y.view(*x.shape[:-1], self.out_features).to(x.dtype)

    def nbytes(self) -> int:
        return self.num_bytes
