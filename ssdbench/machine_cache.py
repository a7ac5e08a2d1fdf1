"""Small per-machine JSON caches in the cache root (ssdbench/cache.py): measured bandwidth, probed kernels.

Best effort both ways: an unreadable cache reads as empty, and one that cannot be written
only costs a new measurement. Writes are atomic (temporary file, then rename).
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def read_entries(path: Path) -> dict:
    """Every entry of the cache file, or {} when it is absent, unreadable or not a JSON object."""
    try:
        entries = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def write_entry(path: Path, key: str, value) -> None:
    """Set one entry, keeping the others."""
    entries = read_entries(path)
    entries[key] = value
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entries, indent=1, allow_nan=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except (OSError, ValueError):
        pass
