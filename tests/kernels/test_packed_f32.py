"""kernels/packed_f32.c (`packed_f32`, the float32 kernel for a verify's few rows): right against a float64
reference for any row count and shape on every instruction-set path, a row's result bitwise independent
of the rows beside it, and the paths equal bit for bit (one chain of multiply-adds per output)."""

import pytest
import torch

from ssdbench.kernels.gemv import PackedF32Linear, gemv_unavailable_reason
from ssdbench.kernels.linear import select_dense_kernel
from test_int8_kernels import isa_build, on_every_isa_build  # noqa: F401

pytestmark = pytest.mark.skipif(gemv_unavailable_reason("cpu", torch.float32) is not None,
                                reason=f"the kernel library cannot be built here: "
                                       f"{gemv_unavailable_reason('cpu', torch.float32)}")


def packed(w: torch.Tensor, b: torch.Tensor | None) -> PackedF32Linear:
    return PackedF32Linear(w, b, device="cpu", dtype=torch.float32)


@pytest.mark.parametrize("in_features,out_features", [(64, 48), (37, 5), (576, 96), (1, 3), (40, 7), (96, 33)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_packed_f32_matches_float64_for_any_row_count(isa_build, in_features, out_features, with_bias):
    gen = torch.Generator().manual_seed(in_features * 7 + out_features)
    w = torch.randn(out_features, in_features, generator=gen)  # [out, in]
    b = torch.randn(out_features, generator=gen) if with_bias else None  # [out]
    linear = packed(w, b)
    for rows in (1, 2, 3, 4, 5, 8, 9, 17):  # past each path's tile of 8 or 4 rows
        x = torch.randn(2, rows, in_features, generator=gen)  # [B, T, in]
        got = linear(x)
        assert got.shape == (2, rows, out_features) and got.dtype == torch.float32
        want = torch.nn.functional.linear(x.double(), w.double(), None if b is None else b.double())
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * in_features**0.5)


def test_a_rows_result_does_not_depend_on_the_rows_beside_it(isa_build):
    gen = torch.Generator().manual_seed(3)
    linear = packed(torch.randn(300, 200, generator=gen), torch.randn(300, generator=gen))
    x = torch.randn(1, 13, 200, generator=gen)  # [B, T, in]: a verify and more
    together = linear(x)
    for t in range(13):
        assert torch.equal(linear(x[:, t : t + 1]), together[:, t : t + 1])  # bitwise, not close


def test_every_instruction_path_gives_the_same_bits(tmp_path, monkeypatch):
    gen = torch.Generator().manual_seed(5)
    w, b = torch.randn(70, 100, generator=gen), torch.randn(70, generator=gen)  # [out, in], [out]
    x = torch.randn(11, 100, generator=gen)  # [rows, in]
    results = on_every_isa_build(tmp_path, monkeypatch, lambda: packed(w, b)(x))
    assert len(results) >= 2, f"only {list(results)} could be built here"
    first = next(iter(results.values()))
    for name, got in results.items():
        assert torch.equal(got, first), name


def test_it_can_be_pinned_as_the_dense_kernel():
    choice = select_dense_kernel("packed_f32", "cpu", torch.float32, shapes=[(64, 48)])
    assert choice.name == "packed_f32"
