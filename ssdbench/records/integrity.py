"""Checking a run's Parquet files against the sizes and sha256 hashes its manifest recorded.

A swapped or edited table (another run's steps.parquet copied in, a file rewritten by hand)
reads as valid Parquet; only the hashes written at finish time can tell it apart.
"""

from __future__ import annotations

from pathlib import Path

from ssdbench.errors import RunDirectoryError
from ssdbench.records.manifest import sha256_file


def verify_recorded_file(file: Path, manifest: dict) -> None:
    """RunDirectoryError (one line) unless `file` is byte-for-byte the one the manifest recorded.

    Manifests without a "files" record (written before hashes were kept) cannot be checked.
    """
    recorded = manifest.get("files")
    if not isinstance(recorded, dict):
        return
    entry = recorded.get(file.name)
    if not isinstance(entry, dict) or "sha256" not in entry:
        raise RunDirectoryError(f"{file} is not listed in the run's manifest with a hash: refusing to read it")
    if file.stat().st_size != entry.get("bytes", file.stat().st_size) or sha256_file(file) != entry["sha256"]:
        raise RunDirectoryError(f"{file} does not match the sha256 recorded in manifest.json: it was changed or "
                                "replaced after the run (refusing to analyse it)")
