"""`ssdbench sweep`: a grid of run points sharing one set of loaded models, resumable.

Each point is an ordinary run directory under the sweep's folder; `index.json` lists the
points. A point whose run is complete is skipped on resume; one left failed, interrupted
or half-written is moved aside (kept for inspection) and run again.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ssdbench.config import RunConfig
from ssdbench.errors import RunDirectoryError, UsageError
from ssdbench.records import strict_json
from ssdbench.records.writer import enclosing_run

INDEX_NAME = "index.json"


@dataclass(frozen=True)
class SweepPoint:
    batch_size: int
    temperature: float
    k: int
    fan_out: str | None  # None: the base config's

    @property
    def name(self) -> str:
        parts = [f"b{self.batch_size}", f"t{self.temperature:g}", f"k{self.k}"]
        return "-".join(parts + ([f"f{self.fan_out}"] if self.fan_out else []))


def grid(batch_sizes, temperatures, ks, fan_outs) -> list[SweepPoint]:
    points = [SweepPoint(b, t, k, f) for b, t, k, f in itertools.product(batch_sizes, temperatures, ks, fan_outs or [None])]
    if not points:
        raise UsageError("the sweep grid is empty")
    return points


def point_config(base: RunConfig, point: SweepPoint, sweep_dir: Path) -> RunConfig:
    changes = {"batch_size": point.batch_size, "temperature": point.temperature, "k": point.k, "out": sweep_dir / point.name}
    if point.fan_out:
        changes["fan_out"] = point.fan_out
    return dataclasses.replace(base, **changes)


def point_status(path: Path) -> str:
    """complete, absent, or the status of a run that did not finish (running/failed/interrupted/unreadable)."""
    manifest = path / "manifest.json"
    if not path.exists():
        return "absent"
    try:
        return json.loads(manifest.read_text()).get("status", "unreadable")
    except (OSError, ValueError):
        return "unreadable" if any(path.iterdir()) else "absent"


def set_aside(path: Path) -> Path:
    """Move an unfinished point out of the way (kept, renamed) so it can be run again."""
    for n in itertools.count(1):
        target = path.with_name(f"{path.name}.unfinished-{n}")
        if not target.exists():
            os.replace(path, target)
            return target
    raise AssertionError("unreachable")


def write_index(sweep_dir: Path, base: RunConfig, points: list[SweepPoint], statuses: dict[str, str]) -> None:
    data = {"base_config": base.to_dict(), "points": [
        {**dataclasses.asdict(p), "name": p.name, "run_dir": p.name, "status": statuses.get(p.name, "pending")}
        for p in points]}
    tmp = sweep_dir / f".{INDEX_NAME}.tmp"
    tmp.write_text(strict_json.dumps(data, indent=2))
    os.replace(tmp, sweep_dir / INDEX_NAME)


def prepare_sweep_dir(sweep_dir: Path) -> None:
    """A new or empty folder, or an earlier sweep's folder (resumed); anything else is refused."""
    if sweep_dir.exists() and not sweep_dir.is_dir():
        raise RunDirectoryError(f"--out {sweep_dir} is a file, not a sweep folder")
    run = enclosing_run(sweep_dir)
    if run is not None:
        raise RunDirectoryError(f"--out {sweep_dir} is inside the run directory {run}; choose a folder outside it")
    if sweep_dir.is_dir() and any(sweep_dir.iterdir()) and not (sweep_dir / INDEX_NAME).is_file():
        raise RunDirectoryError(f"--out {sweep_dir} is not empty and holds no {INDEX_NAME}: not a sweep to resume")
    try:
        sweep_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RunDirectoryError(f"cannot create sweep folder {sweep_dir}: {err.strerror or err}") from None
