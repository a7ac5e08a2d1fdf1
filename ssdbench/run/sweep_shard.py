"""Sweeps that span machines: `sweep --shard I/N` runs every N-th point of the grid (from the I-th)
into a folder of its own, and `merge` joins the N folders into one sweep.

A shard's index.json says which slice it holds of which grid, run by which code; `merge` refuses
shards of different grids, settings or code, a missing or repeated shard, and points not complete.
The merged folder holds each point's run directory as its shard wrote it (tables and hashes
unchanged) and the index an unsharded sweep of the same grid writes.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ssdbench.errors import RunDirectoryError, UsageError
from ssdbench.run.sweep_index import SweepIndex, read_index, write_index


@dataclass(frozen=True)
class Shard:
    index: int  # 1..count
    count: int

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"

    def take(self, items: list) -> list:
        """This shard's slice: every count-th item from the index-th, so each shard gets a spread of the grid."""
        return items[self.index - 1::self.count]


def parse_shard(text: str) -> Shard:
    index, sep, count = text.partition("/")
    try:
        shard = Shard(int(index), int(count)) if sep else None
    except ValueError:
        shard = None
    if shard is None or not 1 <= shard.index <= shard.count:
        raise UsageError(f"--shard expects I/N with 1 <= I <= N (e.g. 2/3), got '{text}'")
    return shard


def code_identity() -> dict:
    """What must be the same in every shard's process: ssdbench's version and git commit (and dirtiness)."""
    from ssdbench import __version__
    from ssdbench.records.manifest import git_state

    return {"version": __version__, "git": git_state()}


def shard_record(shard: Shard, grid_names: list[str]) -> dict:
    """The index's record of a shard: which slice, of which grid, run by which code."""
    if shard.count > len(grid_names):
        raise UsageError(f"--shard {shard.label}: the grid has only {len(grid_names)} point(s), fewer than {shard.count} "
                         "shards")
    return {"index": shard.index, "count": shard.count, "grid": grid_names, "code": code_identity()}


def read_shards(folders: list[Path]) -> list[dict]:
    """Each folder's index, checked to be one shard of one and the same sweep, every shard there once."""
    indexes = []
    for folder in folders:
        index = read_index(folder)
        if index is None:
            raise RunDirectoryError(f"{folder} holds no index.json: not a sweep shard")
        if not isinstance(index.get("shard"), dict):
            raise UsageError(f"{folder} is a whole sweep, not a shard (run with --shard I/N); nothing to merge")
        indexes.append(index)
    first = indexes[0]
    for folder, index in zip(folders[1:], indexes[1:]):
        _check_same_sweep(folders[0], first, folder, index)
    _check_every_shard_once(folders, [index["shard"] for index in indexes])
    return indexes


def _check_same_sweep(first_folder: Path, first: dict, folder: Path, index: dict) -> None:
    for what, read in (("grid", lambda i: (i["shard"].get("count"), i["shard"].get("grid"))),
                       ("settings", lambda i: i["base_config"]),
                       ("code", lambda i: i["shard"].get("code"))):
        if read(first) != read(index):
            raise UsageError(f"{folder} and {first_folder} are shards of sweeps with different {what}"
                             f"{_code_difference(first, index) if what == 'code' else ''}; merge only the shards of "
                             "one sweep run by one version of ssdbench")


def _code_difference(first: dict, other: dict) -> str:
    a, b = first["shard"].get("code") or {}, other["shard"].get("code") or {}
    def describe(code: dict) -> str:
        git = code.get("git") or {}
        return f"{code.get('version')} at {(git.get('commit') or 'no commit')[:10]}{' (dirty)' if git.get('dirty') else ''}"
    return f" ({describe(a)} vs {describe(b)})"


def _check_every_shard_once(folders: list[Path], shards: list[dict]) -> None:
    count = shards[0]["count"]
    seen: dict[int, Path] = {}
    for folder, shard in zip(folders, shards):
        if shard["index"] in seen:
            raise UsageError(f"{folder} and {seen[shard['index']]} are both shard {shard['index']}/{count}")
        seen[shard["index"]] = folder
    missing = [f"{i}/{count}" for i in range(1, count + 1) if i not in seen]
    if missing:
        raise UsageError(f"shard(s) {', '.join(missing)} missing: a merged sweep needs every shard")


def merged_entries(folders: list[Path], indexes: list[dict]) -> list[tuple[dict, Path]]:
    """Every point of the grid in grid order, with the shard folder holding it; refused unless complete."""
    from ssdbench.run.sweep import point_status

    grid = indexes[0]["shard"]["grid"]
    found: dict[str, tuple[dict, Path]] = {}
    for folder, index in zip(folders, indexes):
        for entry in index["points"]:
            if isinstance(entry, dict) and entry.get("name") in grid:
                found[entry["name"]] = (entry, folder)
    for name in grid:
        if name not in found:
            raise UsageError(f"point {name} of the grid is in no shard's index: rerun its shard")
        entry, folder = found[name]
        status = point_status(folder / entry["run_dir"])
        if status != "complete":
            raise UsageError(f"point {name} in {folder} is not complete ({status}); rerun that shard (it resumes) "
                             "before merging")
    return [found[name] for name in grid]


def merge_shards(folders: list[Path], out: Path) -> list[str]:
    """Join the shards into the sweep folder `out` (new or empty); returns the points' names in grid order."""
    from ssdbench.run.sweep import prepare_sweep_dir

    indexes = read_shards(folders)
    entries = merged_entries(folders, indexes)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise RunDirectoryError(f"--out {out} already exists and is not empty: merge into a new folder")
    prepare_sweep_dir(out)
    for entry, folder in entries:
        _copy_run(folder / entry["run_dir"], out / entry["name"])
    points = [{k: v for k, v in entry.items() if k != "status"} for entry, _ in entries]
    write_index(out, SweepIndex(base_config=indexes[0]["base_config"]), points,
                {point["name"]: "complete" for point in points})  # last: the index lists only what is there
    return [point["name"] for point in points]


def _copy_run(source: Path, target: Path) -> None:
    """Copy a run directory whole or not at all: under a temporary name, renamed into place."""
    staging = target.with_name(f".{target.name}.merging")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        shutil.copytree(source, staging)
        os.replace(staging, target)
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise RunDirectoryError(f"cannot copy {source} into {target.parent}: {err.strerror or err}") from None
