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
from typing import Any

from ssdbench.errors import RunDirectoryError, UsageError
from ssdbench.records.writer import enclosing_run
from ssdbench.run.settings import RunSettings
from ssdbench.run.sweep_index import INDEX_NAME

ALWAYS_NAMED = ("batch_size", "temperature", "k")  # every point's name says these, swept or not
SHORT_NAMES = {"batch_size": "b", "temperature": "t", "k": "k", "fan_out": "f"}


@dataclass(frozen=True)
class SweepPoint:
    """One point of the grid: the settings it changes from the base, in axis order."""

    values: tuple[tuple[str, Any], ...]  # (RunSettings field, value)

    @property
    def name(self) -> str:
        return "-".join(_name_part(field, value) for field, value in self.values)

    def as_dict(self) -> dict:
        return dict(self.values)


def _name_part(field: str, value: Any) -> str:
    text = f"{value:g}" if isinstance(value, float) else ",".join(value) if isinstance(value, tuple) else str(value)
    text = "".join(c if c.isalnum() or c in ".,_+" else "_" for c in text)
    return f"{SHORT_NAMES.get(field, field.replace('_', '-') + '=')}{text}"


def grid(base: RunSettings, axes: dict[str, list]) -> list[SweepPoint]:
    """Every combination of the axes' values (field -> values), batch size, temperature and K first."""
    fields = list(ALWAYS_NAMED) + [f for f in axes if f not in ALWAYS_NAMED]
    columns = [axes.get(f) or [getattr(base, f)] for f in fields]
    if any(not values for values in axes.values()):
        raise UsageError("the sweep grid is empty")
    points = [SweepPoint(tuple(zip(fields, combo))) for combo in itertools.product(*columns)]
    names = [p.name for p in points]
    if len(set(names)) != len(names):
        raise UsageError("the sweep grid lists a value twice on one axis")
    return points


def point_settings(base: RunSettings, point: SweepPoint, sweep_dir: Path) -> RunSettings:
    return dataclasses.replace(base, **point.as_dict(), out=sweep_dir / point.name)


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


def index_entry(point: SweepPoint) -> dict:
    """The point as index.json lists it: its settings, name and run directory (status added on writing)."""
    return {**{k: list(v) if isinstance(v, tuple) else v for k, v in point.values}, "name": point.name,
            "run_dir": point.name}


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
