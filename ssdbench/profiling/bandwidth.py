"""Measured memory read bandwidth, the denominator of memory-bandwidth utilisation (MBU).

Bandwidth is in GB/s (10^9 bytes per second), the unit of GPU datasheets.
"""

from __future__ import annotations

import functools
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path


def default_cache_path() -> Path:
    """`$XDG_CACHE_HOME/ssdbench/bandwidth.json` (default `~/.cache/ssdbench/...`)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ssdbench" / "bandwidth.json"


def _cache_key(device: str, size_mib: int) -> str:
    """Identifies the measurement: machine, device model, and CPU threads for a CPU."""
    import torch

    from ssdbench.records.manifest import cpu_model

    dev = torch.device(device)
    if dev.type == "cuda":
        what = torch.cuda.get_device_name(dev)
    else:
        what = f"{cpu_model()}|threads={torch.get_num_threads()}"
    return f"{platform.node()}|{dev}|{what}|{size_mib}MiB"


def _read_cache(path: Path, key: str) -> float | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    valid = isinstance(value, (int, float)) and math.isfinite(value) and value > 0
    return float(value) if valid else None


def _write_cache(path: Path, key: str, value: float) -> None:
    """Best effort: a cache that cannot be written only costs a re-measurement."""
    try:
        entries = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        if not isinstance(entries, dict):
            entries = {}
    except (OSError, ValueError):
        entries = {}
    entries[key] = value
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass


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
        _write_cache(cache_path, key, value)
    return value


def bandwidth_utilisation(bytes_per_step: float, steps_per_s: float,
                          bandwidth_gbs: float) -> float:
    """Fraction of the memory bandwidth a decode uses: bytes read per second / bandwidth."""
    if not bandwidth_gbs > 0:
        raise ValueError(f"bandwidth_gbs must be positive, got {bandwidth_gbs}")
    return bytes_per_step * steps_per_s / (bandwidth_gbs * 1e9)
