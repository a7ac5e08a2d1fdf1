"""What a study is: the sweeps it runs (each an ordinary sweep folder under DIR) and how it judges them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from ssdbench.run.settings import RunSettings


@dataclass(frozen=True)
class StudySweep:
    """One sweep of a study: DIR/<folder>, the settings the study fixes on the user's, and its axes."""

    folder: str
    settings: dict[str, Any]  # RunSettings fields the study sets
    axes: dict[str, list]  # RunSettings field -> values (the sweep's grid)
    skipped: str | None = None  # why this sweep cannot run here (e.g. a suite without its data); judged so


@dataclass(frozen=True)
class StudyData:
    """A study's recorded rounds: every point's steps and requests, with the point's settings as columns."""

    steps: pd.DataFrame
    requests: pd.DataFrame
    base: RunSettings
    skipped: dict[str, str] = field(default_factory=dict)  # folder -> why it did not run
    events: pd.DataFrame = field(default_factory=pd.DataFrame)  # ssd's draft timeline, with the point's columns


@dataclass(frozen=True)
class Study:
    name: str
    claim: str
    paper: str  # the paper's figure or wording
    sweeps: Callable[[RunSettings, bool], list[StudySweep]]  # (the user's settings, quick) -> sweeps
    judge: Callable[[StudyData], list]  # -> [Finding]
    why: str  # the setting it runs at and why (docs/DESIGN.md §10 says it at length)


def point_columns(frame: pd.DataFrame, values: dict[str, Any], folder: str) -> pd.DataFrame:
    """Tag a point's rows with its settings (`p_<field>`) and sweep folder."""
    return frame.assign(sweep=folder, **{f"p_{k}": (",".join(v) if isinstance(v, tuple) else v)
                                         for k, v in values.items()})


def load_study(out: Path, sweeps: list[StudySweep], base: RunSettings) -> StudyData:
    """Every complete point of the study's sweeps, loaded from the records."""
    from ssdbench.records.reader import load_run
    from ssdbench.run.sweep import grid, point_status

    steps, requests, events, skipped = [], [], [], {}
    for sweep in sweeps:
        if sweep.skipped:
            skipped[sweep.folder] = sweep.skipped
            continue
        settings = study_base(base, sweep)
        for point in grid(settings, sweep.axes):
            path = out / sweep.folder / point.name
            if point_status(path) != "complete":
                continue
            run = load_run(path)
            values = {**{k: getattr(settings, k) for k in sweep.settings}, **point.as_dict()}
            steps.append(point_columns(run.steps, values, sweep.folder))
            requests.append(point_columns(run.requests, values, sweep.folder))
            if run.events is not None and not run.events.empty:
                events.append(point_columns(run.events, values, sweep.folder))
    frame = lambda parts: pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()  # noqa: E731
    return StudyData(frame(steps), frame(requests), base, skipped, frame(events))


def study_base(base: RunSettings, sweep: StudySweep) -> RunSettings:
    """The sweep's base settings: the user's with the study's; no `out` (each point gets its folder), so the
    shards of one study, run into folders of their own, record the same settings and can be merged."""
    import dataclasses

    return dataclasses.replace(base, **sweep.settings, out=None)
