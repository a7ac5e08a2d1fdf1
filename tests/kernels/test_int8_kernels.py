"""The self-draft's int8 kernels: gemv.c's int8 path right against the dequantised weights for any
row count and on every instruction-set path it has, a row's result independent of the row count,
and the probe choosing among what works here (each path can be forced off)."""

import pytest
import torch

from ssdbench.kernels import gemv
from ssdbench.kernels.gemv import gemv_i8_unavailable_reason
from ssdbench.models.int8.dynamic import ENGINES, INT8_BF16, INT8_FBGEMM, INT8_ONEDNN, dynamic_unavailable_reason
from ssdbench.models.int8.select import INT8_CANDIDATES, INT8_CLASSES, select_int8_kernel
from ssdbench.models.int8.rows import (INT8_DEQUANT, INT8_GEMV, INT8_PACK, Int8DequantLinear, Int8DotLinear,
                                       Int8GemvLinear, Int8PackLinear)
from ssdbench.models.int8.quantise import quantize_int8

SHAPES = ((32, 48), (48, 32))
needs_gemv = pytest.mark.skipif(gemv_i8_unavailable_reason("cpu") is not None,
                                reason=f"int8 gemv cannot run here: {gemv_i8_unavailable_reason('cpu')}")


def dequantised_reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """x @ dequant(w)^T + b in float64, from quantize_int8's own integers and scales."""
    q, scales = quantize_int8(w)  # [out, in], [out]
    return torch.nn.functional.linear(x.double(), q.double() * scales.double()[:, None],
                                      None if b is None else b.double())


def quantised_inputs(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    """x as dot_i8.c sees it: per block of `block` values, int8 of amax/127 steps (round half to even)."""
    x = x.double()
    out = torch.empty_like(x)
    for lo in range(0, x.shape[-1], block):
        part = x[..., lo : lo + block]
        step = part.abs().amax(-1, keepdim=True) / 127  # [..., 1]
        out[..., lo : lo + block] = torch.round(part / step.where(step > 0, 1)) * step
    return out


def int8_inputs_reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """dot_i8.c's linear in float64: quantised inputs against quantize_int8's integers and scales."""
    return dequantised_reference(quantised_inputs(x.float()), w, b)


KERNELS = {"int8_gemv": (Int8GemvLinear, dequantised_reference), "int8_dot": (Int8DotLinear, int8_inputs_reference)}


def cc_without(tmp_path, *flags: str) -> str:
    """A compiler that builds for this CPU minus some instruction sets: the kernel's other code paths."""
    wrapper = tmp_path / f"cc{''.join(flags)}"
    wrapper.write_text(f"#!/bin/sh\nexec cc \"$@\" {' '.join(flags)}\n")
    wrapper.chmod(0o755)
    return str(wrapper)


# avx2-or-less keeps AVX-VNNI where the CPU has it (vnni_i8.c's ymm vpdpbusd); avx2-no-vnni takes it away too
ISA_PATHS = {"native": (), "avx2-or-less": ("-mno-avx512f",), "avx2-no-vnni": ("-mno-avx512f", "-mno-avxvnni"),
             "sse4.1-or-less": ("-mno-avx512f", "-mno-avx2"), "generic": ("-mno-avx512f", "-mno-avx2", "-mno-sse4.1")}


def on_every_isa_build(tmp_path, monkeypatch, compute) -> dict:
    """compute() on the library built for each ISA_PATHS entry that builds here, by entry name."""
    results = {}
    try:
        for name, flags in ISA_PATHS.items():
            monkeypatch.setenv("CC", cc_without(tmp_path, *flags) if flags else "cc")
            monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
            gemv._load.cache_clear()
            if gemv_i8_unavailable_reason("cpu") is None:
                results[name] = compute()
    finally:
        gemv._load.cache_clear()
    return results


@pytest.fixture(params=list(ISA_PATHS))
def isa_build(request, tmp_path, monkeypatch):
    """gemv.c built with the named instruction sets switched off (where it builds at all)."""
    flags = ISA_PATHS[request.param]
    if flags:
        monkeypatch.setenv("CC", cc_without(tmp_path, *flags))
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    gemv._load.cache_clear()
    reason = gemv_i8_unavailable_reason("cpu")
    if reason is not None:
        gemv._load.cache_clear()
        pytest.skip(f"int8 gemv cannot be built this way here: {reason}")
    yield request.param
    gemv._load.cache_clear()  # later tests load the ordinary build again


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("in_features,out_features", [(64, 48), (37, 5), (576, 96), (1, 3), (40, 7), (96, 33)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_int8_kernels_match_their_reference_for_any_row_count(isa_build, kernel, in_features, out_features,
                                                              with_bias):
    """int8_gemv against the dequantised weights; int8_dot against them with its quantised inputs."""
    cls, reference = KERNELS[kernel]
    gen = torch.Generator().manual_seed(in_features * 131 + out_features)
    w = torch.randn(out_features, in_features, generator=gen)  # [out, in]
    b = torch.randn(out_features, generator=gen) if with_bias else None  # [out]
    linear = cls(w, b, device="cpu")
    for rows in (1, 2, 3, 4, 5, 9):
        x = torch.randn(2, rows, in_features, generator=gen)  # [B, T, in]
        got = linear(x)
        assert got.shape == (2, rows, out_features) and got.dtype == torch.float32
        torch.testing.assert_close(got.double(), reference(x, w, b), rtol=1e-5, atol=1e-5 * in_features**0.5)


def test_int8_dot_stays_near_the_float_inputs():
    """Its one approximation, the inputs' int8 blocks, stays well inside the probe's tolerance."""
    gen = torch.Generator().manual_seed(5)
    w, x = torch.randn(64, 576, generator=gen), torch.randn(3, 576, generator=gen)
    exact = dequantised_reference(x, w, None)
    error = (Int8DotLinear(w, None, device="cpu")(x).double() - exact).norm() / exact.norm()
    assert 0 < error < 0.01


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_a_rows_int8_result_does_not_depend_on_how_many_rows_share_the_call(isa_build, kernel):
    gen = torch.Generator().manual_seed(7)
    linear = KERNELS[kernel][0](torch.randn(300, 200, generator=gen), torch.randn(300, generator=gen), device="cpu")
    x = torch.randn(1, 8, 200, generator=gen)  # [B, T, in]: a verify of K+1 = 8 tokens
    together = linear(x)  # [1, 8, 300]
    for t in range(8):
        assert torch.equal(linear(x[:, t : t + 1]), together[:, t : t + 1])  # bitwise, not close


@needs_gemv
@pytest.mark.parametrize("block_bytes", [64 * 4 * 16, 64 * 4 * 17, 1 << 20])  # 16, 17 (a ragged last block), all 40
def test_the_widened_block_gemm_matches_the_quantised_linear_at_any_block_size(monkeypatch, block_bytes):
    from ssdbench.models.int8 import rows
    monkeypatch.setattr(rows, "WIDENED_BLOCK_BYTES", block_bytes)
    gen = torch.Generator().manual_seed(4)
    w, b = torch.randn(40, 64, generator=gen), torch.randn(40, generator=gen)  # [out, in], [out]
    x = torch.randn(2, 70, 64, generator=gen)  # [.., rows, in]: a prefill's many rows
    linear = Int8DequantLinear(w, b, device="cpu")
    assert linear.block == max(16, block_bytes // (4 * 64))
    torch.testing.assert_close(linear(x).double(), dequantised_reference(x, w, b), atol=1e-4, rtol=1e-4)


def test_int8_gemv_takes_bf16_activations_and_gives_bf16_back():
    w, x = torch.randn(24, 32), torch.randn(3, 32)
    got = Int8GemvLinear(w, None, device="cpu")(x.bfloat16())
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), dequantised_reference(x.bfloat16().float(), w, None), rtol=0.02,
                               atol=0.05)


def test_every_int8_kernel_computes_the_same_quantised_linear():
    gen = torch.Generator().manual_seed(3)
    w, b = torch.randn(40, 64, generator=gen), torch.randn(40, generator=gen)  # [out, in], [out]
    x = torch.randn(3, 5, 64, generator=gen)  # [.., in]
    want = dequantised_reference(x, w, b)
    torch.testing.assert_close(Int8DequantLinear(w, b, device="cpu")(x).double(), want, atol=1e-4, rtol=1e-4)
    # int8pack_mm: bf16 scales and activations inside: close, not equal
    if select_int8_kernel("cpu", torch.float32, shapes=SHAPES, disabled=frozenset({INT8_GEMV})).name == INT8_PACK:
        torch.testing.assert_close(Int8PackLinear(w, b, device="cpu")(x).double(), want, atol=0.1, rtol=0.02)
    if gemv_i8_unavailable_reason("cpu") is None:
        torch.testing.assert_close(Int8GemvLinear(w, b, device="cpu")(x).double(), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kernel", [INT8_FBGEMM, INT8_ONEDNN])
def test_the_quantized_engines_compute_the_quantised_linear_with_two_digit_activations(kernel):
    """Each row near the dequantised weights' result (two 8-bit digits: about 1e-4 of the row, where one
    digit gives ~1e-2), even beside a row 50x larger (a prompt's first token); any row count, with bias,
    float32 or bf16 out as it came in."""
    if (reason := dynamic_unavailable_reason(kernel, "cpu")) is not None:
        pytest.skip(f"{kernel} cannot run here: {reason}")
    gen = torch.Generator().manual_seed(11)
    w, b = torch.randn(96, 576, generator=gen), torch.randn(96, generator=gen)  # [out, in], [out]
    linear = INT8_CLASSES[kernel](w, b, device="cpu")
    for rows in (1, 2, 5, 16, 140):
        x = torch.randn(1, rows, 576, generator=gen)  # [B, T, in]
        x[0, 0] *= 50
        got, want = linear(x), dequantised_reference(x, w, b)
        assert got.shape == (1, rows, 96) and got.dtype == torch.float32
        error = (got.double() - want).norm(dim=-1) / want.norm(dim=-1)  # [1, rows]
        assert 0 < float(error.max()) < 1e-3, (rows, error)
    assert linear(x.bfloat16()).dtype == torch.bfloat16


def test_the_bf16_layout_holds_the_int8_values_exactly_and_rounds_only_activations_and_sums():
    """Against the dequantised weights with the activations rounded to bf16: the int8 values (|w| <= 127) lose
    nothing, the float32 sums one bf16 rounding on the way out, whatever the row count; a row 50x larger
    costs the others nothing."""
    gen = torch.Generator().manual_seed(12)
    w, b = torch.randn(96, 576, generator=gen), torch.randn(96, generator=gen)  # [out, in], [out]
    try:
        linear = INT8_CLASSES[INT8_BF16](w, b, device="cpu")
        linear(torch.ones(1, 576))
    except RuntimeError as err:
        pytest.skip(f"oneDNN's bf16 GEMM does not run here: {err}")
    for rows in (1, 2, 16, 140):
        x = torch.randn(1, rows, 576, generator=gen)  # [B, T, in]
        x[0, 0] *= 50
        want = dequantised_reference(x.bfloat16().float(), w, b)
        got = linear(x)
        assert got.shape == (1, rows, 96) and got.dtype == torch.float32
        error = (got.double() - want).norm(dim=-1) / want.norm(dim=-1)  # [1, rows]
        assert float(error.max()) < 4e-3, (rows, error)  # 2^-9 per output, from the bf16 result
        unrounded = (got.double() - dequantised_reference(x, w, b)).norm(dim=-1) / want.norm(dim=-1)
        assert float(unrounded.max()) < 1e-2  # and the activations' bf16 rounding: 8 significant bits


def test_the_gemm_candidates_are_judged_by_their_own_needs_not_int8packs():
    """int8pack_mm crashes on input widths that are not multiples of 16; the GEMM candidates take any width,
    and say plainly where they cannot run."""
    from ssdbench.models.int8.select import _int8_unavailable_reason

    odd = ((24, 40), (40, 24))
    assert _int8_unavailable_reason(INT8_PACK, "cpu", odd) is not None
    for kernel in (INT8_BF16, INT8_FBGEMM, INT8_ONEDNN):
        assert _int8_unavailable_reason(kernel, "cpu", odd) == dynamic_unavailable_reason(kernel, "cpu")
        assert _int8_unavailable_reason(kernel, "cuda", odd) == "needs a CPU, not cuda"
    if dynamic_unavailable_reason(INT8_BF16, "cpu") is None:
        choice = select_int8_kernel("cpu", torch.float32, shapes=odd, disabled=frozenset(INT8_CANDIDATES) - {INT8_BF16})
        trial = next(t for t in choice.trials if t.kernel == INT8_BF16)
        assert trial.works or "bf16" in trial.reason  # tried on the odd widths: it runs, or this CPU has no bf16 GEMM


def test_the_quantized_engines_pack_without_changing_torchs_engine():
    before = torch.backends.quantized.engine
    for kernel, engine in ENGINES.items():
        if dynamic_unavailable_reason(kernel, "cpu") is None:
            INT8_CLASSES[kernel](torch.randn(8, 16), None, device="cpu")
            assert torch.backends.quantized.engine == before
    assert dynamic_unavailable_reason(INT8_FBGEMM, "cuda") == "needs a CPU, not cuda"


def test_forcing_each_int8_path_off():
    every = frozenset(INT8_CANDIDATES)
    for kept in INT8_CANDIDATES:
        choice = select_int8_kernel("cpu", torch.float32, shapes=SHAPES, disabled=every - {kept})
        trials = {t.kernel: t for t in choice.trials}
        assert set(trials) == {kept}
        assert choice.name == (kept if trials[kept].works else INT8_DEQUANT)
    assert select_int8_kernel("cpu", torch.float32, shapes=SHAPES, disabled=every).name == INT8_DEQUANT
    both = select_int8_kernel("cpu", torch.float32, shapes=SHAPES)
    working = [t for t in both.trials if t.works]
    assert all(t.ms_by_rows for t in working) if len(working) > 1 else True  # timed only when there is a choice
    assert both.few in {t.kernel for t in working} | {INT8_DEQUANT}


def test_without_a_compiler_the_int8_probe_keeps_torchs_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CC", "no-such-compiler-ssdbench")
    gemv._load.cache_clear()
    select_int8_kernel.cache_clear()  # what a process started here would see
    try:
        choice = select_int8_kernel("cpu", torch.float32, shapes=((16, 16),))
        trials = {t.kernel: t for t in choice.trials}
        assert not trials[INT8_GEMV].works and "no C compiler" in trials[INT8_GEMV].reason
        assert INT8_GEMV not in choice.name
    finally:
        gemv._load.cache_clear()
        select_int8_kernel.cache_clear()


def test_a_choice_is_cached_per_machine(tmp_path):
    path = tmp_path / "kernels.json"
    first = select_int8_kernel("cpu", torch.float32, shapes=((24, 40),), cache_path=path)
    assert path.is_file()
    select_int8_kernel.cache_clear()  # what a later process sees: only the file
    assert select_int8_kernel("cpu", torch.float32, shapes=((24, 40),), cache_path=path) == first


def test_int8pack_is_not_tried_on_widths_that_crash_it():
    """torch's _weight_int8pack_mm kills the process on input widths that are not multiples of 16
    (seen with 24 and 40 features, 2+ rows): such shapes never reach it."""
    choice = select_int8_kernel("cpu", torch.float32, shapes=((24, 40), (32, 8)))
    trials = {t.kernel: t for t in choice.trials}
    assert not trials[INT8_PACK].works and "multiples of 16, not [24]" in trials[INT8_PACK].reason
    with pytest.raises(ValueError, match="not a multiple of 16"):
        Int8PackLinear(torch.randn(8, 24), None, device="cpu")


SATURATION_CHECK = """
import torch
from ssdbench.models.int8.dynamic import INT8_ONEDNN, Int8OnednnLinear, needs_reduced_range
w = torch.ones(8, 64)  # [out, in]: every product at full range
linear = Int8OnednnLinear(w, None, device="cpu")
full = torch.ops.quantized.linear_dynamic(torch.ones(1, 64), linear.packed, False)
print(needs_reduced_range(INT8_ONEDNN), float(linear(torch.ones(1, 64)).mean()), float(full.mean()))
"""


@pytest.mark.parametrize("isa,saturates", [("AVX2", True), ("DEFAULT", None)])
def test_a_cpu_whose_8_bit_products_saturate_gets_7_bit_activations(isa, saturates):
    """oneDNN limited to AVX2 (no VNNI) multiplies with maddubs, which saturates full-range products:
    the kernel finds that out by trying, and its results stay right."""
    import subprocess
    import sys

    if dynamic_unavailable_reason(INT8_ONEDNN, "cpu") is not None:
        pytest.skip("oneDNN's quantized engine is not in this torch")
    env = {**__import__("os").environ, "ONEDNN_MAX_CPU_ISA": isa}
    out = subprocess.run([sys.executable, "-c", SATURATION_CHECK], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    reduced, kept, full_range = out[0] == "True", float(out[1]), float(out[2])
    assert kept == pytest.approx(64.0, rel=0.02)
    if saturates:
        assert reduced and full_range < 40  # what 8-bit activations would have given: about half
    elif not reduced:
        assert full_range == pytest.approx(64.0, rel=0.02)
