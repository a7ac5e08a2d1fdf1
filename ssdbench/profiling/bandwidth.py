"""Measured memory read bandwidth, the denominator of memory-bandwidth utilisation (MBU).

Bandwidth is in GB/s (10^9 bytes per second), the unit of GPU datasheets.
"""

from __future__ import annotations

import functools
import math
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ssdbench.cache import cache_file
from ssdbench.machine_cache import read_entries, write_entry


def default_cache_path() -> Path:
    """`the cache root (ssdbench/cache.py): bandwidth.json` (default `~/.cache/ssdbench/...`)."""
    return cache_file("bandwidth.json")


def _cache_key(device: str, size_mib: int) -> str:
    """Identifies the measurement: machine, device model, and CPU threads for a CPU."""
    import torch

    from ssdbench.profiling.environment import cpu_model

    dev = torch.device(device)
    if dev.type == "cuda":
        what = torch.cuda.get_device_name(dev)
    else:
        what = f"{cpu_model()}|threads={torch.get_num_threads()}"
    return f"{platform.node()}|{dev}|{what}|{size_mib}MiB"


def _read_cache(path: Path, key: str) -> float | None:
    value = read_entries(path).get(key)
    valid = isinstance(value, (int, float)) and math.isfinite(value) and value > 0
    return float(value) if valid else None



def _time_sum_s(tensor, device) -> float:
    """Seconds for one full read of `tensor` (a sum), synchronised on CUDA."""
    import torch

    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        tensor.sum()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    tensor.sum()
    return time.perf_counter() - t0


def _measure(device: str, size_mib: int, repeats: int) -> float:
    import torch

    dev = torch.device(device)
    tensor = torch.ones(size_mib * 2**20 // 4, dtype=torch.float32, device=dev)  # touches pages
    _time_sum_s(tensor, dev)  # warm-up
    times = [_time_sum_s(tensor, dev) for _ in range(repeats)]
    return tensor.numel() * tensor.element_size() / statistics.median(times) / 1e9


@functools.cache
def measure_read_bandwidth_gbs(device: str = "cpu", *, size_mib: int = 256, repeats: int = 5,
                               cache_path: Path | None = None) -> float:
    """Median read bandwidth of `device` in GB/s, from summing a `size_mib` float32 tensor.

    Cached in-process per arguments; with `cache_path` (e.g. `default_cache_path()`) also
    across processes, keyed by host, device model and (on CPU) thread count.
    """
    if size_mib <= 0 or repeats <= 0:
        raise ValueError(f"size_mib and repeats must be positive, got {size_mib}, {repeats}")
    key = _cache_key(device, size_mib) if cache_path is not None else ""
    if cache_path is not None and (cached := _read_cache(cache_path, key)) is not None:
        return cached
    value = _measure(device, size_mib, repeats)
    if cache_path is not None:
        write_entry(cache_path, key, value)
    return value


@dataclass(frozen=True)
class BandwidthReading:
    """A steady read bandwidth: the median pass over several sizes, with the spread of the passes."""

    gbs: float
    p10_gbs: float
    p90_gbs: float
    num_passes: int
    sizes_mib: tuple[int, ...]
    threads: int

    def describe(self) -> dict:
        return asdict(self)


STEADY_SIZES_MIB = (64, 128, 256)  # each beyond a server's last-level cache share; the reading is their median
STEADY_BUDGET_MS = 300.0


def measure_steady_read_bandwidth(device: str = "cpu", *, sizes_mib: tuple[int, ...] = STEADY_SIZES_MIB,
                                  budget_ms: float = STEADY_BUDGET_MS, min_passes: int = 3) -> BandwidthReading:
    """Read bandwidth in GB/s as the median of many timed passes, within about `budget_ms`.

    Each size is warmed up once (pages touched, threads started), then summed repeatedly for
    its share of the budget (at least `min_passes` times). One pass is easily disturbed by
    another process, so the reading is a median and the 10th-90th percentile spread is kept
    beside it. Run it where the measured role runs (same pinning and thread count).
    """
    import torch

    if not sizes_mib or budget_ms <= 0 or min_passes <= 0:
        raise ValueError(f"need sizes, a positive budget and passes, got {sizes_mib}, {budget_ms}, {min_passes}")
    dev = torch.device(device)
    rates = []
    for size in sizes_mib:
        tensor = torch.ones(size * 2**20 // 4, dtype=torch.float32, device=dev)  # touches pages
        _time_sum_s(tensor, dev)  # warm-up
        spent_s, passes = 0.0, 0
        while passes < min_passes or spent_s * 1e3 < budget_ms / len(sizes_mib):
            seconds = _time_sum_s(tensor, dev)
            spent_s, passes = spent_s + seconds, passes + 1
            rates.append(tensor.numel() * tensor.element_size() / seconds / 1e9)
        del tensor
    deciles = statistics.quantiles(rates, n=10) if len(rates) > 1 else rates * 9
    return BandwidthReading(gbs=statistics.median(rates), p10_gbs=deciles[0], p90_gbs=deciles[-1],
                            num_passes=len(rates), sizes_mib=tuple(sizes_mib), threads=torch.get_num_threads())


def bandwidth_utilisation(bytes_per_step: float, steps_per_s: float,
                          bandwidth_gbs: float) -> float:
    """Fraction of the memory bandwidth a decode uses: bytes read per second / bandwidth."""
    if not bandwidth_gbs > 0:
        raise ValueError(f"bandwidth_gbs must be positive, got {bandwidth_gbs}")
    return bytes_per_step * steps_per_s / (bandwidth_gbs * 1e9)
