"""The step floors benchmarks/step_costs.py prints: the larger of the weights' read time and the
multiply-adds' time at the peak of the kernel's own instructions, from rates measured here."""

import math

import pytest
import torch

from ssdbench.kernels.gemv import gemv_unavailable_reason
from ssdbench.kernels.floors import Rates, measure_rates

RATES = Rates(read_bytes_per_s=10e9, f32_macs_per_s=50e9, int8_macs_per_s=200e9, int8_path="avx2",
              tiles_macs_per_s=1000e9)


def test_a_one_row_step_is_bound_by_its_weight_reads():
    ms, bound = RATES.floor_ms(weight_bytes=100_000_000, macs=100_000_000, kernel="int8_vnni")
    assert bound == "bandwidth" and ms == pytest.approx(10.0)


def test_many_rows_are_bound_by_the_kernels_own_peak():
    # 140 rows of 100M multiply-adds: 70 ms at the int8 peak, 280 ms at the f32 one, 28 ms on the tiles (two digits)
    assert RATES.floor_ms(100_000_000, 140 * 100_000_000, "int8_vnni") == (pytest.approx(70.0), "compute")
    assert RATES.floor_ms(400_000_000, 140 * 100_000_000, "packed_f32") == (pytest.approx(280.0), "compute")
    assert RATES.floor_ms(100_000_000, 140 * 100_000_000, "int8_tiles") == (pytest.approx(28.0), "compute")


def test_attention_adds_its_float32_multiply_adds_at_the_f32_peak():
    # 70 ms of int8 products, then 5e9 attention multiply-adds at 50 GMAC/s: 100 ms more
    assert RATES.floor_ms(100_000_000, 140 * 100_000_000, "int8_vnni", attention_macs=5_000_000_000) == (
        pytest.approx(170.0), "compute")
    # a one-row step's few attention products leave it bound by its weight reads
    assert RATES.floor_ms(100_000_000, 100_000_000, "int8_vnni", attention_macs=10_000_000)[1] == "bandwidth"


def test_a_kernel_whose_peak_is_not_measured_gets_the_bandwidth_floor():
    assert RATES.floor_ms(100_000_000, 10**12, "int8_bf16") == (pytest.approx(10.0), "bandwidth")


@pytest.mark.skipif(gemv_unavailable_reason("cpu", torch.float32) is not None, reason="no kernel library here")
def test_the_rates_are_measured_here():
    rates = measure_rates(8 << 20)
    for value in (rates.read_bytes_per_s, rates.f32_macs_per_s, rates.int8_macs_per_s):
        assert math.isfinite(value) and value > 1e8
    assert rates.int8_path in ("avx512-vnni", "avx-vnni", "avx2", "plain loops")
