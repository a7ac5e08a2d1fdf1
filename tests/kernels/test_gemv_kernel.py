"""The `gemv` dense kernel (kernels/gemv.c): right against float64, a row's result independent of
how many rows share the call, and cleanly absent where it cannot be built."""

import pytest
import torch

from ssdbench.errors import UsageError
from ssdbench.kernels import gemv
from ssdbench.kernels.gemv import GemvLinear, gemv_unavailable_reason
from ssdbench.kernels.linear import select_dense_kernel

pytestmark = pytest.mark.skipif(gemv_unavailable_reason("cpu", torch.float32) is not None,
                                reason=f"gemv cannot run here: {gemv_unavailable_reason('cpu', torch.float32)}")


@pytest.mark.parametrize("in_features,out_features", [(64, 48), (37, 5), (576, 960), (1, 3)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_gemv_matches_a_float64_reference_for_any_row_count(in_features, out_features, with_bias):
    gen = torch.Generator().manual_seed(in_features * 131 + out_features)
    w = torch.randn(out_features, in_features, generator=gen)  # [out, in]
    b = torch.randn(out_features, generator=gen) if with_bias else None  # [out]
    linear = GemvLinear(w, b, device="cpu", dtype=torch.float32)
    for rows in (1, 2, 5, 9):
        x = torch.randn(2, rows, in_features, generator=gen)  # [B, T, in]
        want = torch.nn.functional.linear(x.double(), w.double(), None if b is None else b.double())
        got = linear(x)
        assert got.shape == (2, rows, out_features) and got.dtype == torch.float32
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * in_features**0.5)


def test_a_rows_result_does_not_depend_on_how_many_rows_share_the_call():
    gen = torch.Generator().manual_seed(7)
    linear = GemvLinear(torch.randn(300, 200, generator=gen), torch.randn(300, generator=gen),
                        device="cpu", dtype=torch.float32)
    x = torch.randn(1, 8, 200, generator=gen)  # [B, T, in]: a verify of K+1 = 8 tokens
    together = linear(x)  # [1, 8, 300]
    for t in range(8):
        assert torch.equal(linear(x[:, t : t + 1]), together[:, t : t + 1])  # bitwise, not close


def test_a_non_contiguous_input_is_read_correctly():
    gen = torch.Generator().manual_seed(8)
    w = torch.randn(16, 24, generator=gen)
    x = torch.randn(24, 3, generator=gen).t()  # [3, 24], transposed view
    torch.testing.assert_close(GemvLinear(w, None, device="cpu", dtype=torch.float32)(x), x @ w.t())


def test_a_wrong_input_is_an_error_not_garbage():
    linear = GemvLinear(torch.randn(4, 8), None, device="cpu", dtype=torch.float32)
    with pytest.raises(ValueError, match="gemv"):
        linear(torch.randn(1, 7))
    with pytest.raises(ValueError, match="gemv"):
        linear(torch.randn(1, 8, dtype=torch.float64))


def test_other_devices_and_dtypes_say_why_not():
    assert gemv_unavailable_reason("cuda", torch.float32) == "needs a CPU, not cuda"
    assert gemv_unavailable_reason("cpu", torch.bfloat16) == "takes float32 only, not bfloat16"
    with pytest.raises(UsageError, match="'gemv' does not work for bfloat16 on cpu: takes float32 only"):
        select_dense_kernel("gemv", "cpu", torch.bfloat16, shapes=[(8, 8)])


def test_without_a_compiler_the_probe_keeps_the_other_kernels(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # no build cached there
    monkeypatch.setenv("CC", "no-such-compiler-ssdbench")
    gemv._load.cache_clear()
    try:
        reason = gemv_unavailable_reason("cpu", torch.float32)
        assert reason is not None and "no C compiler" in reason and "no-such-compiler-ssdbench" in reason
        choice = select_dense_kernel("auto", "cpu", torch.float32, shapes=[(32, 48)])
        trials = {t.kernel: t for t in choice.trials}
        assert not trials["gemv"].works and trials["gemv"].reason == reason
        assert "gemv" not in choice.name
        with pytest.raises(UsageError, match="linear kernel 'gemv' does not work for float32 on cpu: no C compiler"):
            select_dense_kernel("gemv", "cpu", torch.float32, shapes=[(32, 48)])
    finally:
        gemv._load.cache_clear()  # later tests load the real build again


def test_a_build_that_fails_says_so_in_one_line(tmp_path, monkeypatch):
    broken = tmp_path / "cc"
    broken.write_text("#!/bin/sh\necho 'cc: error: unrecognized option' >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", str(broken))
    gemv._load.cache_clear()
    try:
        reason = gemv_unavailable_reason("cpu", torch.float32)
        assert reason == f"building gemv.c with {broken} failed: cc: error: unrecognized option"
        assert not list((tmp_path / "cache").rglob("*.so*"))  # nothing half-built left behind
    finally:
        gemv._load.cache_clear()
