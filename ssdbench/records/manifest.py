"""What a run records about its files and software: hashes, git state, package versions, times.

The hardware side (CPU, GPUs, memory) is captured by ssdbench.profiling.environment."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import subprocess
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
