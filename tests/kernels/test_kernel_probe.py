"""The kernel probe: a kernel is used only if it runs and is right here, each path can be forced off,
and what a model runs is what it reports."""

import json

import pytest
import torch

from ssdbench.errors import UsageError
from ssdbench.kernels import probe
from ssdbench.kernels.gemv import gemv_unavailable_reason
from ssdbench.kernels.linear import (DENSE_CANDIDATES, FUSABLE, MatmulLinear, OnednnLinear, RowSplitLinear,
                                    onednn_unavailable_reason, select_dense_kernel)
from ssdbench.models.int8.dynamic import INT8_BF16, INT8_FBGEMM, INT8_ONEDNN
from ssdbench.models.int8.select import INT8_CANDIDATES
from ssdbench.models.int8.rows import INT8_DEQUANT, INT8_DOT, INT8_GEMV, INT8_PACK
from ssdbench.models.build import build_native_model
from tests.models.test_native_model import assert_native_matches_hf, chain, native_of, tiny_hf_model

SHAPES = [(32, 48), (48, 32)]


def test_a_kernel_that_raises_or_is_wrong_is_not_used():
    def raises(w, b):
        def call(x):
            raise RuntimeError("bf16 path needs the cpu support avx512bw\nmore")
        return call

    def wrong(w, b):
        return lambda x: x @ w.t() * 1.5

    failed = probe.check_kernel("raises", raises, device="cpu", dtype=torch.float32)
    assert not failed.works and failed.reason == "RuntimeError: bf16 path needs the cpu support avx512bw"
    off = probe.check_kernel("wrong", wrong, device="cpu", dtype=torch.float32)
    assert not off.works and off.reason.startswith("wrong result")
    right = probe.check_kernel("right", lambda w, b: lambda x: x @ w.t() + b, device="cpu", dtype=torch.float32)
    assert right.works
    assert probe.choose([failed, off, right]).name == "right"
    with pytest.raises(RuntimeError, match="no dense linear kernel works here"):
        probe.choose([failed, off])


def _trial(kernel: str, ms: dict[int, float]) -> probe.KernelTrial:
    return probe.KernelTrial(kernel, works=True, ms_by_rows=tuple(ms.items()))


def test_choice_per_row_count_switches_where_the_many_row_kernel_starts_to_win():
    fast_one_row = _trial("a", {1: 1.0, 2: 1.5, 4: 3.0, 8: 6.0})
    flat = _trial("b", {1: 2.0, 2: 2.0, 4: 2.1, 8: 2.2})
    choice = probe.choose([fast_one_row, flat])
    assert (choice.few, choice.many, choice.split_rows) == ("a", "b", 3)  # a won at 1 and 2 rows
    assert choice.name == "a<3rows<=b"
    prefill = probe.choose([_trial("stream", {1: 1.0, 8: 2.0, 32: 8.0}), _trial("gemm", {1: 2.0, 8: 2.5, 32: 3.0})])
    assert prefill.name == "stream<9rows<=gemm"  # a 20-token prompt goes to the GEMM, not the streamer
    broken_run = probe.choose([_trial("a", {1: 1.0, 2: 3.0, 4: 1.0, 8: 9.0}), _trial("b", {1: 2, 2: 2, 4: 2, 8: 2})])
    assert broken_run.name == "a<5rows<=b"  # a 1.5x off at 2 rows beats b 2x off at 1 and 4 rows
    worse = probe.choose([_trial("a", {1: 1.0, 2: 3.0, 4: 1.9, 8: 9.0}), _trial("b", {1: 2, 2: 2, 4: 2, 8: 2})])
    assert worse.name == "a<2rows<=b"  # b from the first row count a loses at, where nothing is gained later
    only = probe.choose([flat, _trial("c", {1: 3.0, 2: 3.0, 4: 3.0, 8: 3.0})])
    assert (only.few, only.many, only.name) == ("b", "b", "b")
    tie = probe.choose([_trial("x", {1: 1.05, 2: 1, 4: 1, 8: 1}), _trial("y", {1: 1.0, 2: 1, 4: 1, 8: 1})])
    assert tie.name == "x"  # within 10%: the earlier candidate


def test_a_third_kernel_that_only_ties_does_not_cut_the_one_row_kernels_run():
    """The int8 probe of one thread on an Intel Xeon (ms): int8_gemv came within 10% of int8_dot at 2 rows
    and, being earlier, won the tie there; int8_dot must still keep every row count it is near-best at."""
    trials = [_trial("int8_gemv", {1: 1.586, 2: 1.935, 4: 1.675, 8: 2.861, 32: 14.403, 128: 57.879}),
              _trial("int8_dot", {1: 1.385, 2: 1.77, 4: 1.366, 8: 2.193, 32: 8.377, 128: 36.28}),
              _trial("int8pack_mm", {1: 2.135, 2: 1.97, 4: 1.66, 8: 2.741, 32: 10.338, 128: 40.569}),
              _trial("int8_dequant", {1: 6.087, 2: 5.469, 4: 5.375, 8: 6.099, 32: 12.52, 128: 29.215})]
    assert probe.choose(trials).name == "int8_dot<33rows<=int8_dequant"
    gemv_ties_at_one_row = [_trial("int8_gemv", {1: 1.45, 2: 1.935, 4: 1.675, 8: 2.861, 32: 14.403, 128: 57.879}),
                            *trials[1:]]
    assert probe.choose(gemv_ties_at_one_row).name == "int8_dot<33rows<=int8_dequant"  # the longer near-best run


def test_a_fused_model_keeps_one_row_on_a_fused_kernel_and_the_credit_moves_the_split():
    """The int8 probe of one thread on an Intel Xeon with torch's quantized engines among the candidates (ms).
    Only int8_gemv and int8_dot run inside the fused step: one row stays with them even where a GEMM ties,
    and their credit for the Python work fusing saves keeps 2 rows fused (step_costs.py: fused int8_dot
    26 ms at 2 rows, the Python path on int8_onednn 33 ms)."""
    trials = [_trial("int8_dot", {1: 1.62, 2: 1.91, 4: 1.59, 8: 2.48, 16: 5.01, 32: 9.77, 128: 41.9}),
              _trial("int8_gemv", {1: 1.73, 2: 2.08, 4: 1.97, 8: 3.33, 16: 6.67, 32: 16.18, 128: 64.18}),
              _trial("int8_fbgemm", {1: 1.71, 2: 1.34, 4: 1.05, 8: 1.02, 16: 1.4, 32: 2.36, 128: 10.85}),
              _trial("int8_onednn", {1: 1.72, 2: 1.85, 4: 1.29, 8: 1.26, 16: 1.25, 32: 1.61, 128: 3.85})]
    fused = {"int8_gemv", "int8_dot"}
    assert probe.choose(trials, fused_kernels=fused).name == "int8_dot<3rows<=int8_onednn"
    # judged on the linears alone, one row goes to a GEMM kernel and no step could fuse
    assert probe.choose(trials).name == "int8_fbgemm<9rows<=int8_onednn"
    gemm_wins_one_row = [trials[0], _trial("gemm", {1: 0.5, 2: 0.5, 4: 0.5, 8: 0.5, 16: 0.5, 32: 0.5, 128: 0.5})]
    assert probe.choose(gemm_wins_one_row).name == "gemm"
    assert probe.choose(gemm_wins_one_row, fused_kernels=fused).name == "int8_dot<2rows<=gemm"


def test_a_gap_every_choice_shares_at_many_rows_does_not_make_a_slower_one_row_kernel_a_tie():
    """The fp32 target's probe on one Intel Xeon core (ms): every assignment is 15% off at 128 rows, which
    once made gemv (24% slower than matmul at one row) tie with matmul there and win as the earlier one."""
    trials = [_trial("onednn", {1: 4.64, 2: 5.06, 4: 3.54, 8: 3.61, 16: 5.07, 32: 7.51, 128: 23.45}),
              _trial("gemv", {1: 4.54, 2: 6.12, 4: 7.5, 8: 10.85, 16: 18.16, 32: 33.12, 128: 122.68}),
              _trial("matmul", {1: 3.65, 2: 4.79, 4: 5.02, 8: 5.81, 16: 6.77, 32: 7.97, 128: 20.36})]
    assert probe.choose(trials).few == "matmul"


def test_row_split_linear_dispatches_on_rows():
    w_few, w_many = torch.randn(6, 4), torch.randn(6, 4)  # [out, in]
    split = RowSplitLinear(MatmulLinear(w_few, None, device="cpu", dtype=torch.float32),
                           MatmulLinear(w_many, None, device="cpu", dtype=torch.float32), split_rows=2)
    one, three = torch.randn(1, 1, 4), torch.randn(1, 3, 4)  # [B, T, in]
    torch.testing.assert_close(split(one), one @ w_few.t())
    torch.testing.assert_close(split(three), three @ w_many.t())
    assert split.nbytes() == 6 * 4 * 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_auto_picks_a_working_kernel_for_every_dtype_on_this_cpu(dtype):
    choice = select_dense_kernel("auto", "cpu", dtype, shapes=SHAPES)
    trials = {t.kernel: t for t in choice.trials}
    assert trials[choice.few].works and trials[choice.many].works
    onednn_reason = onednn_unavailable_reason("cpu", dtype)
    if onednn_reason is not None:  # this torch cannot even try it
        assert not trials["onednn"].works and trials["onednn"].reason == onednn_reason
    if not trials["onednn"].works:  # e.g. bf16 on an AVX2-only CPU
        assert choice.name == "matmul"


def test_a_float32_model_that_fuses_runs_one_row_on_a_fused_kernel_and_keeps_its_own_cached_choice(tmp_path):
    """With `fuses`, one row goes to a kernel decode_layer.c runs (the fused credit's rule), whatever the timings;
    the choice is cached apart from the unfused one, which may give one row to oneDNN or matmul."""
    if gemv_unavailable_reason("cpu", torch.float32) is not None:
        pytest.skip("our C kernels cannot be built here: no dense kernel fuses")
    path = tmp_path / "kernels.json"
    fused = select_dense_kernel("auto", "cpu", torch.float32, shapes=SHAPES, cache_path=path, fuses=True)
    assert fused.few in FUSABLE
    select_dense_kernel("auto", "cpu", torch.float32, shapes=SHAPES, cache_path=path)
    assert len(json.loads(path.read_text())) == 2
    assert select_dense_kernel("auto", "cpu", torch.float32, shapes=SHAPES, cache_path=path, fuses=True) == fused


def test_forcing_each_dense_path_off():
    only = lambda kept: frozenset(DENSE_CANDIDATES) - {kept}  # noqa: E731
    assert select_dense_kernel("auto", "cpu", torch.float32, shapes=SHAPES, disabled=only("matmul")).name == "matmul"
    if onednn_unavailable_reason("cpu", torch.float32) is None:
        assert select_dense_kernel("auto", "cpu", torch.float32, shapes=SHAPES, disabled=only("onednn")).name == "onednn"
    if gemv_unavailable_reason("cpu", torch.float32) is None:
        assert select_dense_kernel("auto", "cpu", torch.float32, shapes=SHAPES, disabled=only("gemv")).name == "gemv"
    with pytest.raises(RuntimeError, match="no dense linear kernel works"):
        select_dense_kernel("auto", "cpu", torch.float16, shapes=SHAPES, disabled=frozenset({"matmul"}))


def test_a_named_kernel_that_cannot_run_is_one_usage_error():
    with pytest.raises(UsageError, match="'onednn' does not work for float32 on cuda: needs a CPU"):
        select_dense_kernel("onednn", "cuda", torch.float32, shapes=SHAPES)
    with pytest.raises(UsageError, match="unknown linear kernel"):
        select_dense_kernel("mkl", "cpu", torch.float32, shapes=SHAPES)
    make = lambda w, b: OnednnLinear(w, b, device="cpu", dtype=torch.bfloat16)  # noqa: E731
    bf16 = probe.check_kernel("onednn", make, device="cpu", dtype=torch.bfloat16)
    if not bf16.works:  # an AVX2-only CPU: asking for it by name says why
        with pytest.raises(UsageError, match="does not work for bfloat16 on cpu"):
            select_dense_kernel("onednn", "cpu", torch.bfloat16, shapes=SHAPES)


def test_a_choice_is_cached_per_machine(tmp_path):
    path = tmp_path / "kernels.json"
    first = select_dense_kernel("auto", "cpu", torch.float32, shapes=SHAPES, cache_path=path)
    assert path.is_file()
    again = select_dense_kernel("auto", "cpu", torch.float32, shapes=SHAPES, cache_path=path)
    assert again == first
    other_shapes = select_dense_kernel("auto", "cpu", torch.float32, shapes=[(16, 16)], cache_path=path)
    assert len(json.loads(path.read_text())) == 2 and other_shapes.trials


@pytest.mark.parametrize("disabled", [frozenset(), frozenset({"onednn"}), frozenset({"matmul"}),
                                      frozenset({"gemv"}), frozenset({"onednn", "matmul"})])
def test_models_built_with_a_path_forced_off_match_transformers_and_say_what_they_run(disabled):
    if "gemv" not in disabled and (reason := gemv_unavailable_reason("cpu", torch.float32)) and len(disabled) == 2:
        pytest.skip(f"gemv is the only path left and cannot run here: {reason}")
    hf = tiny_hf_model("llama")
    tokens = torch.randint(0, 97, (1, 12), generator=torch.Generator().manual_seed(3))  # [B, T]
    assert_native_matches_hf(hf, tokens, chunk=4, disabled_kernels=disabled)
    model = native_of(hf, disabled_kernels=disabled)
    used = model.describe()["kernels"]
    assert used["attention"] == "sdpa"
    for name in disabled:
        assert name not in used["linear"]
    assert used["linear"] == model.lm_head.name == model.layers[0].qkv.name


ALL_BUT_DEQUANT = frozenset(INT8_CANDIDATES) - {INT8_DEQUANT}


@pytest.mark.parametrize("disabled", [frozenset(), frozenset({INT8_GEMV}), frozenset({INT8_PACK}),
                                      frozenset({INT8_DOT}), frozenset({INT8_BF16, INT8_FBGEMM, INT8_ONEDNN}),
                                      frozenset({INT8_GEMV, INT8_DOT}), ALL_BUT_DEQUANT])
def test_int8_models_with_a_path_forced_off_agree_and_say_what_they_run(disabled):
    hf = tiny_hf_model("llama")
    tokens = chain(8)
    model = native_of(hf, weights="int8", disabled_kernels=disabled)
    used = model.describe()["kernels"]["linear"]
    assert used == model.lm_head.name and not any(name in used for name in disabled)
    if disabled == ALL_BUT_DEQUANT:
        assert used == INT8_DEQUANT
    reference = native_of(hf, weights="int8", disabled_kernels=ALL_BUT_DEQUANT)
    a, b = model.forward(tokens, tokens), reference.forward(tokens, tokens)
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() > 0.8


def test_bf16_model_runs_on_this_cpu_whatever_its_instruction_set():
    hf = tiny_hf_model("llama")
    model = build_native_model(hf.config, hf.state_dict(), dtype=torch.bfloat16)
    model.allocate(1, 16)
    logits = model.forward(chain(6), chain(6))
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()


def test_the_run_settings_accept_exactly_the_dense_kernels_there_are():
    from ssdbench.kernels.linear import LINEAR_KERNELS
    from ssdbench.run import settings

    assert settings.LINEAR_KERNELS == LINEAR_KERNELS
