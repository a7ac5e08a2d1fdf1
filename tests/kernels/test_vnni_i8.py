"""kernels/vnni_i8.c (`int8_vnni`): right against its reference on every instruction-set path it has
(AVX-512 VNNI, AVX-VNNI, AVX2, plain loops), its block sums exact integers even at the extremes where
8-bit products saturate 16-bit pairs, the paths equal bit for bit, a row's result independent of the
rows beside it, and the probe never taking it where it would run its plain loops."""

import pytest
import torch

from ssdbench.errors import UsageError
from ssdbench.kernels import gemv
from ssdbench.kernels.gemv import gemv_i8_unavailable_reason, vnni_i8_path, vnni_i8_unavailable_reason
from ssdbench.models.int8.rows import Int8DotLinear
from ssdbench.models.int8.select import INT8_CANDIDATES, select_int8_kernel
from ssdbench.models.int8.vnni import INT8_VNNI, Int8VnniLinear
from test_int8_kernels import ISA_PATHS, cc_without, int8_inputs_reference, isa_build, on_every_isa_build  # noqa: F401

pytestmark = pytest.mark.skipif(gemv_i8_unavailable_reason("cpu") is not None,
                                reason=f"the kernel library cannot be built here: {gemv_i8_unavailable_reason('cpu')}")

# Each path's register tile: 8 rows (AVX-512: every count up to it is a tile of its own), 3 (AVX-VNNI),
# 2 (AVX2); rows past a multiple of each, and widths past a 32-input block and a 32-output task.
ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 33)


@pytest.mark.parametrize("in_features,out_features", [(64, 48), (37, 5), (576, 96), (1, 3), (40, 7), (96, 33),
                                                      (100, 70)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_vnni_matches_its_reference_for_any_row_count(isa_build, in_features, out_features, with_bias):
    """The int8-block activations against quantize_int8's integers and scales, in float64."""
    gen = torch.Generator().manual_seed(in_features * 131 + out_features)
    w = torch.randn(out_features, in_features, generator=gen)  # [out, in]
    b = torch.randn(out_features, generator=gen) if with_bias else None  # [out]
    linear = Int8VnniLinear(w, b, device="cpu")
    for rows in ROWS:
        x = torch.randn(rows, in_features, generator=gen)  # [rows, in]
        got = linear(x)
        assert got.shape == (rows, out_features) and got.dtype == torch.float32
        torch.testing.assert_close(got.double(), int8_inputs_reference(x, w, b), rtol=1e-5,
                                   atol=1e-5 * in_features**0.5)


def extreme_case(in_features: int, out_features: int, rows: int):
    """Weights and inputs at +-127 steps (every block's largest magnitude 127, so scale 1 and steps of 1/8):
    the integer sums are at their largest, a 16-bit pair of products saturates if formed carelessly, and
    every float32 step is exact, so the true result is the integer dot product / 8 exactly."""
    gen = torch.Generator().manual_seed(in_features + rows)
    signs = lambda *shape: torch.where(torch.rand(*shape, generator=gen) < 0.8, 1.0, -1.0)  # mostly one sign
    w_int = 127 * signs(out_features, in_features)  # [out, in]
    x_int = 127 * signs(rows, in_features)  # [rows, in]
    x_int[:, :: 7] = torch.randint(-127, 128, x_int[:, :: 7].shape, generator=gen).float()  # some smaller values
    x_int[:, ::32] = 127  # every block keeps 127 as its largest magnitude
    exact = (x_int.double() @ w_int.double().t()) / 8  # [rows, out]
    return w_int, x_int / 8, exact


@pytest.mark.parametrize("in_features", [32, 1024])  # 1024 x 127 x 127 < 2^24: float32 stays exact
def test_block_sums_are_exact_integers_at_the_extremes(isa_build, in_features):
    w, x, exact = extreme_case(in_features, 40, 9)
    got = Int8VnniLinear(w, None, device="cpu")(x)
    assert torch.equal(got.double(), exact)


@pytest.mark.parametrize("linear_class", [Int8VnniLinear, Int8DotLinear])
def test_activations_round_halves_to_even_on_every_path(isa_build, linear_class):
    """kernels/quant_block.h, which both kernels quantise with (vector lanes with AVX-512, one float at a
    time otherwise): with 127 in every 32-input block the scale is 1, so q = rint(x), and halves go to the
    even integer as rintf's do, not away from zero. Weights 127 * identity give y = 127 q exactly."""
    halves = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 126.5, -126.5, 4.5, 0.25, -3.75])
    x = torch.zeros(2, 64)  # [rows, in]: two blocks a row, the halves in every block, 127 first
    for block in (0, 32):
        x[:, block] = 127.0
        x[:, block + 1 : block + 1 + len(halves)] = halves
    x[1] = -x[1]
    w = 127 * torch.eye(64)  # [out, in]: scale 1, integer 127
    got = linear_class(w, None, device="cpu")(x)
    assert torch.equal(got / 127, torch.round(x))  # torch.round: ties to even


def test_every_instruction_path_gives_the_same_bits(tmp_path, monkeypatch):
    """The float32 steps are the same on every path, so the outputs are equal, not close."""
    gen = torch.Generator().manual_seed(11)
    w, b = torch.randn(70, 100, generator=gen), torch.randn(70, generator=gen)  # [out, in], [out]
    x = torch.randn(17, 100, generator=gen)  # [rows, in]
    results = on_every_isa_build(tmp_path, monkeypatch,
                                 lambda: (vnni_i8_path(), Int8VnniLinear(w, b, device="cpu")(x)))
    assert len({path for path, _ in results.values()}) >= 2, f"only one path could be built here: {results}"
    results = {f"{name} ({path})": got for name, (path, got) in results.items()}
    first = next(iter(results.values()))
    for name, got in results.items():
        assert torch.equal(got, first), name


def test_a_rows_result_does_not_depend_on_the_rows_beside_it(isa_build):
    gen = torch.Generator().manual_seed(7)
    linear = Int8VnniLinear(torch.randn(300, 200, generator=gen), torch.randn(300, generator=gen), device="cpu")
    x = torch.randn(1, 33, 200, generator=gen)  # [B, T, in]: a tree step's many rows
    together = linear(x)  # [1, 33, 300]
    for t in (0, 3, 4, 16, 32):
        assert torch.equal(linear(x[:, t : t + 1]), together[:, t : t + 1])  # bitwise, not close


def test_the_probe_never_takes_it_where_it_would_run_plain_loops(tmp_path, monkeypatch):
    """Built without AVX2 the kernel is correct but slow: not a candidate, and pinning it is refused in one line."""
    monkeypatch.setenv("CC", cc_without(tmp_path, *ISA_PATHS["sse4.1-or-less"]))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    gemv._load.cache_clear()
    select_int8_kernel.cache_clear()
    try:
        if gemv_i8_unavailable_reason("cpu") is not None:
            pytest.skip("the library cannot be built without AVX2 here")
        assert vnni_i8_path() == "plain loops"
        assert "AVX2" in vnni_i8_unavailable_reason("cpu")
        shapes = ((64, 48), (48, 64))
        choice = select_int8_kernel("cpu", torch.float32, shapes=shapes)
        assert INT8_VNNI not in (choice.few, choice.many)
        trial = next(t for t in choice.trials if t.kernel == INT8_VNNI)
        assert not trial.works and "AVX2" in trial.reason
        with pytest.raises(UsageError, match="int8 kernel 'int8_vnni' cannot run here: needs AVX2"):
            select_int8_kernel("cpu", torch.float32, shapes=shapes, kernel=INT8_VNNI)
    finally:
        gemv._load.cache_clear()
        select_int8_kernel.cache_clear()


def test_a_pinned_kernel_is_the_only_one_and_an_unknown_name_is_refused():
    shapes = ((64, 48), (48, 64))
    pinned = select_int8_kernel("cpu", torch.float32, shapes=shapes, kernel="int8_dot")
    assert (pinned.few, pinned.many) == ("int8_dot", "int8_dot") and [t.kernel for t in pinned.trials] == ["int8_dot"]
    with pytest.raises(UsageError, match="unknown int8 kernel 'int8_fast'"):
        select_int8_kernel("cpu", torch.float32, shapes=shapes, kernel="int8_fast")


def test_the_settings_list_every_int8_kernel():
    from ssdbench.run.settings import INT8_KERNELS
    assert INT8_KERNELS == ("auto", *INT8_CANDIDATES)


@pytest.mark.parametrize("linear_class", ["vnni", "dot"])
def test_a_result_does_not_depend_on_the_threads(linear_class):
    """Rows are quantised on every thread from 8 rows up (a prefill's): each row's bits as on one thread."""
    from ssdbench.models.int8.rows import Int8DotLinear

    gen = torch.Generator().manual_seed(5)
    w, b = torch.randn(96, 576, generator=gen), torch.randn(96, generator=gen)  # [out, in], [out]
    linear = (Int8VnniLinear if linear_class == "vnni" else Int8DotLinear)(w, b, device="cpu")
    x = torch.randn(1, 140, 576, generator=gen)  # [B, T, in]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = linear(x)
        torch.set_num_threads(2)
        assert torch.equal(linear(x), alone)
    finally:
        torch.set_num_threads(before)
