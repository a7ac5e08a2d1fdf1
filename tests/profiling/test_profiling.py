"""GPU telemetry (real NVML where present, a stand-in module otherwise) and bandwidth."""

from __future__ import annotations

import json
import math
import sys
import time
import types

import pytest

from ssdbench.profiling import bandwidth
from ssdbench.profiling.bandwidth import bandwidth_utilisation, measure_read_bandwidth_gbs
from ssdbench.profiling.nvml import GpuSampler, describe_gpus
from ssdbench.records.schema import table_from_rows


def fake_pynvml(*, num_devices: int = 2, bad_handle: bool = False) -> types.ModuleType:
    """A stand-in for pynvml: energy is unsupported on device 1, as on some boards."""
    nvml = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):  # noqa: N801 (pynvml's spelling)
        pass

    def handle(index):
        if bad_handle or index >= num_devices:
            raise NVMLError("Invalid Argument")
        return index

    def energy(h):
        if h == 1:
            raise NVMLError_NotSupported("Not Supported")
        return 5_000_000 + time.perf_counter_ns() // 1_000_000

    nvml.NVMLError, nvml.NVML_CLOCK_SM = NVMLError, 1
    nvml.nvmlInit = nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetCount = lambda: num_devices
    nvml.nvmlDeviceGetHandleByIndex = handle
    nvml.nvmlDeviceGetName = lambda h: f"Fake GPU {h}"
    nvml.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"
    nvml.nvmlSystemGetDriverVersion = lambda: b"550.54.15"
    nvml.nvmlSystemGetCudaDriverVersion = lambda: 12040
    nvml.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=40 + h, memory=5)
    nvml.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=3 * 2**30,
                                                                   total=80 * 2**30)
    nvml.nvmlDeviceGetPowerUsage = lambda h: 250_500
    nvml.nvmlDeviceGetTotalEnergyConsumption = energy
    nvml.nvmlDeviceGetClockInfo = lambda h, kind: 1980
    return nvml


def test_sampler_without_nvidia_gpu_gives_no_rows_and_a_reason():
    if describe_gpus()["available"]:
        pytest.skip("this machine has an NVIDIA GPU")
    with GpuSampler({0: "target"}, interval_s=0.01) as sampler:
        time.sleep(0.03)
    assert sampler.rows == []
    assert isinstance(sampler.unavailable_reason, str) and sampler.unavailable_reason
    assert describe_gpus()["reason"] == sampler.unavailable_reason


def test_sampler_rows_fit_the_gpu_table(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    with GpuSampler({0: "target", 1: "draft"}, interval_s=0.005) as sampler:
        time.sleep(0.03)
    rows = sampler.rows
    assert sampler.unavailable_reason is None
    table = table_from_rows("gpu", rows)
    by_device = {i: [r for r in rows if r["device_index"] == i] for i in (0, 1)}
    assert all(len(device_rows) >= 2 for device_rows in by_device.values())
    assert {r["role"] for r in by_device[1]} == {"draft"}
    assert all(r["energy_mj"] is None for r in by_device[1])
    assert all(r["energy_mj"] > 0 for r in by_device[0])
    assert by_device[0][0]["mem_mib"] == 3 * 1024 and by_device[0][0]["power_w"] == 250.5
    times = [r["t_ns"] for r in by_device[0]]
    assert times == sorted(times)
    assert table.num_rows == len(rows)
    count = len(rows)
    time.sleep(0.02)
    assert len(sampler.rows) == count  # the thread has stopped


def test_sampler_with_unopenable_device_gives_no_rows_and_a_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(bad_handle=True))
    with GpuSampler({3: "target"}) as sampler:
        pass
    assert sampler.rows == [] and "cannot open device(s) [3]" in sampler.unavailable_reason


def test_describe_gpus_reports_driver_and_cuda(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(num_devices=1))
    gpus = describe_gpus()
    assert gpus["available"] and gpus["driver_version"] == "550.54.15"
    assert gpus["cuda_driver_version"] == "12.4"
    assert gpus["devices"] == [{"index": 0, "name": "Fake GPU 0", "uuid": "GPU-0",
                                "memory_total_mib": 80 * 1024}]


def test_read_bandwidth_is_in_gb_per_s_and_measured_once_per_process():
    measure_read_bandwidth_gbs.cache_clear()
    gbs = measure_read_bandwidth_gbs("cpu", size_mib=16, repeats=2)
    # any CPU reads memory at 0.5-5000 GB/s; MB/s or bytes/s would fall outside
    assert math.isfinite(gbs) and 0.5 < gbs < 5000
    measure_read_bandwidth_gbs("cpu", size_mib=16, repeats=2)
    info = measure_read_bandwidth_gbs.cache_info()
    assert (info.misses, info.hits) == (1, 1)  # the second call did not measure again


def test_bandwidth_file_cache_is_read_back_and_survives_garbage(tmp_path):
    cache = tmp_path / "ssdbench" / "bandwidth.json"
    measured = measure_read_bandwidth_gbs("cpu", size_mib=8, repeats=1, cache_path=cache)
    [(key, stored)] = json.loads(cache.read_text()).items()
    assert stored == measured and "cpu" in key
    cache.write_text(json.dumps({key: measured / 2}))
    measure_read_bandwidth_gbs.cache_clear()
    assert measure_read_bandwidth_gbs("cpu", size_mib=8, repeats=1,
                                      cache_path=cache) == measured / 2
    cache.write_text("not json")
    measure_read_bandwidth_gbs.cache_clear()
    again = measure_read_bandwidth_gbs("cpu", size_mib=8, repeats=1, cache_path=cache)
    assert again > 0 and json.loads(cache.read_text())[key] == again


def test_default_cache_path_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert bandwidth.default_cache_path() == tmp_path / "ssdbench" / "bandwidth.json"


def test_bandwidth_utilisation_is_bytes_per_second_over_bandwidth():
    bytes_per_step, steps_per_s, gbs = 270e6, 20.0, 40.0
    expected = bytes_per_step * steps_per_s / (gbs * 1e9)
    assert bandwidth_utilisation(bytes_per_step, steps_per_s, gbs) == pytest.approx(expected)
    assert bandwidth_utilisation(bytes_per_step, 2 * steps_per_s, gbs) == pytest.approx(
        2 * expected)
    with pytest.raises(ValueError):
        bandwidth_utilisation(1.0, 1.0, 0.0)


def test_steady_bandwidth_reading_has_its_spread_and_stays_within_budget():
    reading = bandwidth.measure_steady_read_bandwidth("cpu", sizes_mib=(8, 16), budget_ms=60, min_passes=3)
    assert reading.num_passes >= 6 and reading.sizes_mib == (8, 16)
    assert 0 < reading.p10_gbs <= reading.gbs <= reading.p90_gbs and math.isfinite(reading.p90_gbs)
    assert reading.describe()["gbs"] == reading.gbs
    with pytest.raises(ValueError):
        bandwidth.measure_steady_read_bandwidth("cpu", sizes_mib=(), budget_ms=10)


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_the_sampler_opens_the_gpu_torch_names_by_its_uuid():
    """torch and NVML number GPUs differently under CUDA_VISIBLE_DEVICES: the sampler matches UUIDs."""
    pynvml = pytest.importorskip("pynvml")
    from ssdbench.profiling.nvml import _device_handle, cuda_uuid

    pynvml.nvmlInit()
    try:
        by_uuid = pynvml.nvmlDeviceGetHandleByUUID(cuda_uuid(0))  # no fallback: the lookup itself must work
        uuid = pynvml.nvmlDeviceGetUUID(by_uuid)
        assert (uuid.decode() if isinstance(uuid, bytes) else uuid) == cuda_uuid(0)
        assert pynvml.nvmlDeviceGetUUID(_device_handle(pynvml, 0)) == pynvml.nvmlDeviceGetUUID(by_uuid)
    finally:
        pynvml.nvmlShutdown()
    with GpuSampler({0: "target"}, interval_s=0.01) as sampler:
        time.sleep(0.05)
    assert sampler.unavailable_reason is None and sampler.rows
    assert all(row["device_index"] == 0 and row["mem_mib"] > 0 for row in sampler.rows)


def test_device_names_that_need_no_gpu_to_compare():
    from ssdbench.profiling.devices import make_current, same_device

    make_current("cpu")
    make_current("cuda")  # plain "cuda" is the current device already: nothing to set, no CUDA call
    assert same_device("cpu", "cpu") and same_device("cuda:1", "cuda:1")
    assert not same_device("cpu", "cuda:0") and not same_device("cuda:0", "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_plain_cuda_is_the_current_device():
    import torch

    from ssdbench.profiling.devices import make_current, same_device

    make_current("cuda:0")
    assert torch.cuda.current_device() == 0
    assert same_device("cuda", "cuda:0") and same_device(torch.Generator(device="cuda").device, "cuda")
