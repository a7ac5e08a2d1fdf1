"""What a run records about its environment: tool, packages, hardware, file hashes, times."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import subprocess
import sys
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path

PACKAGES = ("torch", "transformers", "pyarrow", "numpy", "pandas", "safetensors", "typer",
            "rich", "nvidia-ml-py", "flash-attn")


def utc_now_iso() -> str:
    """Current UTC time as ISO 8601 with milliseconds, e.g. 2026-03-01T12:00:00.123Z."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def sha256_file(path: str | os.PathLike, *, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes, read `chunk` bytes at a time. OSError if unreadable."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def hash_files(paths: Iterable[str | os.PathLike]) -> dict[str, str]:
    """{path as given: hex SHA-256} for each file."""
    return {str(p): sha256_file(p) for p in paths}


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state() -> dict:
    """Commit (and whether the tree is dirty) of the checkout ssdbench is imported from.

    None when ssdbench is not imported from a git checkout of itself (e.g. installed
    into a virtual environment that happens to live inside some other repository).
    """
    package_dir = Path(__file__).resolve().parents[1]
    top = _git(["rev-parse", "--show-toplevel"], package_dir)
    if top is None or Path(top).resolve() / package_dir.name != package_dir:
        return {"commit": None, "dirty": None}
    status = _git(["status", "--porcelain", "--untracked-files=no"], package_dir)
    return {"commit": _git(["rev-parse", "HEAD"], package_dir),
            "dirty": None if status is None else bool(status)}


def package_versions(names: Iterable[str] = PACKAGES) -> dict[str, str | None]:
    """Installed distribution versions; None for a package that is not installed."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


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
    from ssdbench.profiling.nvml import describe_gpus

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
