"""GPU telemetry through NVML: a background sampler thread and a one-shot device list.

pynvml is imported lazily. Without an NVIDIA GPU `pynvml.nvmlInit()` raises a subclass
of `pynvml.NVMLError`; nothing here lets that (or any NVML failure) reach the run: the
sampler records a reason and produces no rows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _init_nvml() -> tuple[Any, str | None]:
    """(pynvml module, None) once NVML is initialised, else (None, why not)."""
    try:
        import pynvml
    except ImportError:
        return None, "no GPU telemetry: nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        return None, f"no GPU telemetry: {_text(err) or type(err).__name__}"
    except Exception as err:  # a broken driver install must not stop a run
        return None, f"no GPU telemetry: {type(err).__name__}: {err}"
    return pynvml, None


def _cuda_version(pynvml: Any) -> str | None:
    version = _query(pynvml.nvmlSystemGetCudaDriverVersion)
    return None if version is None else f"{version // 1000}.{version % 1000 // 10}"


def describe_gpus() -> dict:
    """NVML's view of the GPUs for the manifest: names, memory, driver and CUDA version."""
    pynvml, reason = _init_nvml()
    if pynvml is None:
        return {"available": False, "reason": reason}
    try:
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = _query(pynvml.nvmlDeviceGetMemoryInfo, handle)
            devices.append({
                "index": index,
                "name": _text(pynvml.nvmlDeviceGetName(handle)),
                "uuid": _text(_query(pynvml.nvmlDeviceGetUUID, handle)),
                "memory_total_mib": None if memory is None else memory.total / 2**20,
            })
        return {"available": True, "driver_version":
                _text(_query(pynvml.nvmlSystemGetDriverVersion)),
                "cuda_driver_version": _cuda_version(pynvml), "devices": devices}
    except Exception as err:
        return {"available": False, "reason": f"NVML query failed: {type(err).__name__}: {err}"}
    finally:
        _query(pynvml.nvmlShutdown)


def _query(fn: Callable, *args: Any) -> Any:
    """fn(*args), or None where the device or driver does not support the query."""
    try:
        return fn(*args)
    except Exception:
        return None


def _sample_device(pynvml: Any, handle: Any) -> dict:
    util = _query(pynvml.nvmlDeviceGetUtilizationRates, handle)
    memory = _query(pynvml.nvmlDeviceGetMemoryInfo, handle)
    power_mw = _query(pynvml.nvmlDeviceGetPowerUsage, handle)
    energy_mj = _query(pynvml.nvmlDeviceGetTotalEnergyConsumption, handle)
    clock = _query(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM)
    return {
        "util_pct": None if util is None else float(util.gpu),
        "mem_mib": None if memory is None else memory.used / 2**20,
        "power_w": None if power_mw is None else power_mw / 1000.0,
        "energy_mj": None if energy_mj is None else float(energy_mj),
        "sm_clock_mhz": None if clock is None else float(clock),
    }


class GpuSampler:
    """Samples NVML every `interval_s` on a daemon thread while used as a context manager.

    `devices` maps torch's CUDA index -> role ("target", "draft", ...); NVML opens each by its
    UUID. `rows` are dicts with the columns of the `gpu` table; `unavailable_reason` says why
    there are none.
    A sample is taken on entry and on exit, so even a short run gets two per device.
    `clock_ns` must be the clock of steps.t_start_ns (time.time_ns, as PhaseClock uses).
    """

    def __init__(self, devices: Mapping[int, str], *, interval_s: float = 0.1,
                 clock_ns: Callable[[], int] = time.time_ns) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.devices = dict(devices)
        self.interval_s = interval_s
        self.unavailable_reason: str | None = None
        self._clock_ns = clock_ns
        self._rows: list[dict] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pynvml: Any = None
        self._handles: dict[int, Any] = {}

    @property
    def rows(self) -> list[dict]:
        with self._lock:
            return list(self._rows)

    def __enter__(self) -> GpuSampler:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        if not self.devices:
            self.unavailable_reason = "no GPU telemetry: no devices to sample"
            return
        self._pynvml, self.unavailable_reason = _init_nvml()
        if self._pynvml is None:
            return
        try:
            self._handles = {i: _device_handle(self._pynvml, i) for i in self.devices}
        except Exception as err:
            self._give_up(f"no GPU telemetry: cannot open device(s) {sorted(self.devices)}: "
                          f"{_text(err)}")
            return
        self._sample_once()
        self._thread = threading.Thread(target=self._run, name="ssdbench-gpu-sampler",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            self._sample_once()
        if self._pynvml is not None:
            _query(self._pynvml.nvmlShutdown)
            self._pynvml = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if not self._sample_once():
                return

    def _sample_once(self) -> bool:
        """Append one row per device; False (and a reason) if sampling broke down."""
        try:
            rows = [{"t_ns": self._clock_ns(), "device_index": index,
                     "role": self.devices[index], **_sample_device(self._pynvml, handle)}
                    for index, handle in self._handles.items()]
        except Exception as err:
            self.unavailable_reason = f"GPU sampling stopped: {type(err).__name__}: {err}"
            return False
        with self._lock:
            self._rows.extend(rows)
        return True

    def _give_up(self, reason: str) -> None:
        self.unavailable_reason = reason
        _query(self._pynvml.nvmlShutdown)
        self._pynvml = None
        self._handles = {}


def _device_handle(pynvml, torch_index: int):
    """NVML's handle of the GPU torch calls `torch_index`, matched by UUID: the two number GPUs
    differently under CUDA_VISIBLE_DEVICES or CUDA's fastest-first order. By index where torch
    cannot name the UUID or NVML cannot find it (no CUDA here; the sampler's own tests)."""
    try:
        return pynvml.nvmlDeviceGetHandleByUUID(cuda_uuid(torch_index))
    except Exception:  # noqa: BLE001 - no CUDA, a torch without the property, or an NVML without the GPU
        return pynvml.nvmlDeviceGetHandleByIndex(torch_index)


def cuda_uuid(torch_index: int) -> str:
    """The UUID of torch's CUDA device `torch_index`, as NVML writes it ("GPU-...")."""
    import torch

    uuid = str(torch.cuda.get_device_properties(torch_index).uuid)
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
