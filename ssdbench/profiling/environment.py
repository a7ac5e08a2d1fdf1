"""The environment of a run, captured for its manifest: tool, Python, packages, CPU, memory, GPUs."""

from __future__ import annotations

import os
import platform
import sys

from ssdbench.profiling.nvml import describe_gpus
from ssdbench.records.manifest import git_state, package_versions


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def total_memory_mib() -> float | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    except (AttributeError, ValueError, OSError):
        return None


def _torch_info() -> dict:
    try:
        import torch
    except ImportError:
        return {"threads": None, "cuda": None}
    return {"threads": torch.get_num_threads(), "cuda": torch.version.cuda}


def capture_environment() -> dict:
    """Everything about this process's software and hardware a reader needs to trust a run."""
    from ssdbench import __version__

    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    torch_info = _torch_info()
    return {
        "tool": {"name": "ssdbench", "version": __version__, "git": git_state()},
        "python": {"version": platform.python_version(),
                   "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "packages": package_versions(),
        "platform": {"system": platform.system(), "release": platform.release(),
                     "machine": platform.machine(), "hostname": platform.node()},
        "cpu": {"model": cpu_model(), "logical_cores": os.cpu_count(),
                "affinity": affinity, "torch_threads": torch_info["threads"]},
        "memory": {"total_mib": total_memory_mib()},
        "torch_cuda_version": torch_info["cuda"],
        "gpus": describe_gpus(),
    }
