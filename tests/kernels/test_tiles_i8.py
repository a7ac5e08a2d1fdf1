"""tiles_i8.c: int8 weights on AMX tiles for many rows. Its plain loop against a float64 reference of
the same arithmetic (rows rounded to 15 bits of their largest magnitude) everywhere; the tiles, where
this machine has them, bit for bit equal to the plain loop, whatever the rows beside a row."""

import pytest
import torch

from ssdbench.kernels.gemv import gemv_i8_unavailable_reason, tiles_i8_functions, tiles_i8_unavailable_reason
from ssdbench.models.int8.quantise import quantize_int8

needs_library = pytest.mark.skipif(gemv_i8_unavailable_reason("cpu") is not None,
                                   reason=f"our C kernels cannot run here: {gemv_i8_unavailable_reason('cpu')}")
needs_tiles = pytest.mark.skipif(gemv_i8_unavailable_reason("cpu") is not None
                                 or tiles_i8_unavailable_reason("cpu") is not None,
                                 reason="no AMX tiles here (the plain loop is still tested)")
SHAPES = [(64, 32), (100, 37), (576, 96), (7, 5), (1536, 40), (130, 33)]  # (in, out): padded and exact tiles


def packed(w: torch.Tensor):
    """quantize_int8's integers and scales of w [out, in], packed as the tiles take them."""
    size, pack, _ = tiles_i8_functions()
    q, scales = quantize_int8(w)
    out, inn = q.shape
    tiles, wsum = torch.empty(size(inn, out), dtype=torch.int8), torch.empty(out, dtype=torch.int32)
    pack(q.contiguous().data_ptr(), tiles.data_ptr(), wsum.data_ptr(), inn, out)
    return tiles, wsum, scales.float().contiguous(), q


def multiply(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, *, use_tiles: int, threads: int = 1):
    """x [rows, in] through ssdbench_tiles_i8 on the tiles (1) or the plain loop (0) -> [rows, out]."""
    tiles, wsum, scales, _ = packed(w)
    y = torch.empty(x.shape[0], w.shape[0])
    status = tiles_i8_functions()[2](x.data_ptr(), tiles.data_ptr(), wsum.data_ptr(), scales.data_ptr(),
                                     None if b is None else b.data_ptr(), y.data_ptr(), x.shape[0], x.shape[1],
                                     w.shape[0], threads, use_tiles)
    assert status == 0
    return y


def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """Each row rounded to 15 bits of its largest magnitude (in float32, as the kernel rounds), times the
    int8 weights and scales in float64."""
    _, _, scales, q = packed(w)
    top = x.abs().amax(-1, keepdim=True)  # [rows, 1] float32
    inv = torch.full_like(top, 16383).div(top).where(top > 0, 0)  # a true division, as the kernel's (16383 / t is not)
    steps = torch.round(x * inv).double()  # [rows, in]: exact integers
    y = (steps * (top / 16383).double()) @ (q.double() * scales.double()[:, None]).t()  # [rows, out]
    return y if b is None else y + b.double()


@needs_library
@pytest.mark.parametrize("in_features,out_features", SHAPES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_the_plain_loop_computes_the_rounded_rows_times_the_int8_weights(in_features, out_features, with_bias):
    gen = torch.Generator().manual_seed(in_features * 7 + out_features)
    w = torch.randn(out_features, in_features, generator=gen)  # [out, in]
    b = torch.randn(out_features, generator=gen) if with_bias else None  # [out]
    for rows in (1, 3, 16, 17, 40):
        x = torch.randn(rows, in_features, generator=gen)  # [rows, in]
        got = multiply(x, w, b, use_tiles=0)
        torch.testing.assert_close(got.double(), reference(x, w, b), rtol=1e-5, atol=1e-5 * in_features**0.5)


@needs_tiles
@pytest.mark.parametrize("in_features,out_features", SHAPES)
@pytest.mark.parametrize("threads", [1, 2])
def test_the_tiles_equal_the_plain_loop_bit_for_bit(in_features, out_features, threads):
    gen = torch.Generator().manual_seed(in_features + out_features)
    w, b = torch.randn(out_features, in_features, generator=gen), torch.randn(out_features, generator=gen)
    for rows in (1, 5, 16, 33, 140):
        x = torch.randn(rows, in_features, generator=gen) * torch.rand(rows, 1, generator=gen) * 10  # [rows, in]
        assert torch.equal(multiply(x, w, b, use_tiles=1, threads=threads), multiply(x, w, b, use_tiles=0))


@needs_tiles
def test_a_rows_result_does_not_depend_on_the_rows_beside_it():
    from ssdbench.models.int8.tiles import Int8TilesLinear

    gen = torch.Generator().manual_seed(3)
    linear = Int8TilesLinear(torch.randn(300, 200, generator=gen), torch.randn(300, generator=gen), device="cpu")
    x = torch.randn(1, 20, 200, generator=gen)  # [B, T, in]: a tree of 20 rows
    x[0, 0] *= 1000  # a prompt's first token: activations far larger than the rest's
    together = linear(x)  # [1, 20, 300]
    for t in range(20):
        assert torch.equal(linear(x[:, t : t + 1]), together[:, t : t + 1])


@needs_tiles
def test_the_probe_can_choose_the_tiles_and_the_model_runs_them_fused():
    from tests.models.test_native_model import native_of, tiny_hf_model
    from ssdbench.models.int8.select import INT8_CANDIDATES

    model = native_of(tiny_hf_model("llama"), weights="int8",
                      disabled_kernels=frozenset(INT8_CANDIDATES) - {"int8_tiles"})
    names = model.kernel_names()
    assert names["linear"] == "int8_tiles" and names["decode_step"] == "fused"
