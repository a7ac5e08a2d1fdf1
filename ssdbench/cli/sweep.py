"""`ssdbench sweep`: a grid of runs with models loaded once.

Takes every option of `run` (declared once, in options.py). A comma list given to a
one-value option (`--k 2,4`, `--temperature 0,0.7`, `--batch-sizes 1,2,4`) is an axis of the
grid; `--grid FIELD=V1,V2` makes an axis of any other run setting (separate values with ';' when a
value holds commas itself: `--grid methods='ar,sd;ar,ssd'`). Settings the models and prompts are
loaded with (settings.SWEEP_FIXED) cannot be axes, and an empty item in a list is refused.
"""

from __future__ import annotations

from dataclasses import replace
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from ssdbench.cli import options as opt
from ssdbench.cli.errors import reports_errors
from ssdbench.cli.signals import signals_interrupt
from ssdbench.errors import UsageError
from ssdbench.run.settings import SWEEP_FIXED, RunSettings

if TYPE_CHECKING:
    from ssdbench.run.sweep_shard import Shard

SWEEP = "Sweep"
SweepOut = Annotated[Path, typer.Option("--out", help="The sweep's folder; re-running resumes.", rich_help_panel=SWEEP)]
Grid = Annotated[Optional[list[str]], typer.Option("--grid", help="An axis over any <...,...> setting: FIELD=V1,V2; "
                 "repeatable.", rich_help_panel=SWEEP)]
ShardOption = Annotated[Optional[str], typer.Option("--shard", help="Run slice I/N of the grid (join with `ssdbench "
                        "merge`).", rich_help_panel=SWEEP)]
SWEEP_OPTIONS = tuple(o for o in opt.RUN_OPTIONS if o.field != "out")  # --out is the sweep's folder


def sweep_command(*, out: Path = Path("runs/sweep"), grid: Optional[list[str]] = None, shard: Optional[str] = None,
                  format: str = "table", **values) -> None:
    from ssdbench.run.sweep import grid as make_grid
    from ssdbench.run.sweep_shard import parse_shard

    part = parse_shard(shard) if shard is not None else None  # checked before anything else
    base_values, axes = _split_axes(values)
    for spec in grid or []:
        field, options = _grid_axis(spec)
        if field in axes:
            raise UsageError(f"--grid {field}: the setting is already an axis of the sweep")
        axes[field] = options
    base = RunSettings(**base_values)
    with signals_interrupt():
        perform_sweep(base, make_grid(base, axes), out, format=format, shard=part)


sweep_command.__signature__ = opt.command_signature(
    [inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=Path("runs/sweep"), annotation=SweepOut),
     inspect.Parameter("grid", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Grid),
     inspect.Parameter("shard", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=ShardOption)]
    + [opt.sweep_parameter(o) for o in SWEEP_OPTIONS]
    + [inspect.Parameter("format", inspect.Parameter.KEYWORD_ONLY, default="table", annotation=opt.Format)])
sweep_command = reports_errors(sweep_command)


def _split_axes(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, list]]:
    """Base settings (one value each) and axes (the options given several comma-separated values)."""
    base, axes = {}, {}
    for field, value in values.items():
        option = opt.BY_FIELD[field]
        if not opt.sweepable(option):
            base[field] = option.to_setting(value)
        elif value is None:
            base[field] = option.to_setting(None)
        else:
            parsed = [opt.parse_value(option, part) for part in _items(f"--{option.name}", str(value), ",")]
            if len(parsed) == 1:
                base[field] = parsed[0]
            else:
                _refuse_fixed_axis(field)
                axes[field] = parsed
                base[field] = parsed[0]
    return base, axes


def _items(flag: str, text: str, separator: str) -> list[str]:
    """The values of a list; an empty one (`2,,4`, `1,`) is refused rather than dropped."""
    parts = text.split(separator)
    if any(not part.strip() for part in parts):
        shown = "no value given" if not text.strip() else f"'{text}' has an empty item"
        raise UsageError(f"{flag}: {shown}; separate values with '{separator}' and leave none empty")
    return parts


def _refuse_fixed_axis(field: str) -> None:
    if field in SWEEP_FIXED:
        raise UsageError(f"--{opt.BY_FIELD[field].name} cannot be an axis: a sweep loads its models and prompts once "
                         "for every point; run one sweep per value")


def _grid_axis(spec: str) -> tuple[str, list]:
    name, sep, text = spec.partition("=")
    if not sep or not text.strip():
        raise UsageError(f"--grid expects FIELD=V1,V2, got '{spec}'")
    option = opt.option_named(name)
    if option.field == "out":
        raise UsageError("--grid out: each point's directory is named by the sweep")
    parts = _items(f"--grid {option.field}", text, ";" if ";" in text or option.listed else ",")
    if len(parts) > 1:
        _refuse_fixed_axis(option.field)
    return option.field, [opt.parse_value(option, part) if not option.listed else option.to_setting(part.strip())
                          for part in parts]


def perform_sweep(base: RunSettings, points, sweep_dir: Path, *, format: str, shard: Shard | None = None,
                  show_frontier: bool = True) -> None:
    """Run the grid's points not yet complete in `sweep_dir` (a shard's: only its slice), models loaded once;
    then print their throughput-latency table (unless `show_frontier` is off: `reproduce` prints findings)."""
    from ssdbench.run import session
    from ssdbench.run.plan import build_plan
    from ssdbench.run.sweep import index_entry, point_settings, point_status, prepare_sweep_dir
    from ssdbench.run.sweep_index import open_index, write_index
    from ssdbench.run.sweep_shard import shard_record

    from ssdbench.run.fit import fit_for

    fits: dict = {}  # points fitted on one earlier run share its fit
    settings = [point_settings(base, p, sweep_dir) for p in points]
    plans = [build_plan(s, fit=fit_for(s, fits)) for s in settings]  # every point checked first
    for plan in plans:
        session.validate(plan)
    _check_same_models(points, plans)
    widest = max(plans, key=lambda p: p.draft_slack)  # prompts fitted once, to the grid's point reaching furthest
    record = shard_record(shard, [p.name for p in points]) if shard is not None else None
    points, plans = (shard.take(points), shard.take(plans)) if shard is not None else (points, plans)
    prepare_sweep_dir(sweep_dir)
    entries = [index_entry(p) for p in points]
    index = open_index(sweep_dir, base, entries, shard=record)  # a resume with other settings is refused here
    console = Console(stderr=format == "json")
    models, workload, suite_info = session.prepare(widest)  # loaded once for every point
    try:
        limits = [session.check_limits(plan, models, workload) for plan in plans]  # before any point loads a model
        session.calibrate_drafts(widest, models, workload)
        statuses = {e["name"]: point_status(sweep_dir / e["name"]) for e in [*index.earlier, *entries]}
        write_index(sweep_dir, index, entries, statuses)
        todo = [(p, plan, limit) for p, plan, limit in zip(points, plans, limits) if statuses[p.name] != "complete"]

        def mark(name: str, status: str) -> None:
            statuses[name] = status
            write_index(sweep_dir, index, entries, statuses)

        _run_points(todo, models, workload, suite_info, sweep_dir, console, mark=mark)
    finally:
        models.close()  # a tensor-parallel target's other ranks
    if show_frontier:
        _print_frontier(_frontier(points, sweep_dir), console, format, skipped=len(points) - len(todo))


def _run_points(todo, models, workload, suite_info, sweep_dir: Path, console: Console, *, mark) -> None:
    """Each (point, plan, limits) in turn; `mark(name, status)` keeps the index saying where each point is."""
    from ssdbench.cli.run import progress_bar
    from ssdbench.run import execute, session
    from ssdbench.run.sweep import point_status, set_aside

    with progress_bar(console) as progress:
        task = progress.add_task("sweep", total=sum(execute.count_units(plan, workload) for _, plan, _ in todo))
        for point, plan, limit in todo:
            if point_status(sweep_dir / point.name) != "absent":
                set_aside(sweep_dir / point.name)
            mark(point.name, "running")
            try:
                session.run_point(plan, models, workload, suite_info,
                                  lambda label, n, name=point.name: progress.update(task, advance=n,
                                                                                    description=f"{name} {label}"),
                                  limits=limit)
            finally:  # interrupted or failed: the index says so too, as the point's own manifest does
                mark(point.name, point_status(sweep_dir / point.name))


def _frontier(points, sweep_dir: Path):
    import pandas as pd

    from ssdbench.records.reader import load_run
    from ssdbench.report.pareto import mark_pareto, throughput_latency

    frames = [throughput_latency(load_run(sweep_dir / point.name).requests).assign(point=point.name)
              for point in points]
    return mark_pareto(pd.concat(frames, ignore_index=True))


def _check_same_models(points, plans) -> None:
    """Models and prompts are loaded once for the whole sweep: no axis may change them. (K may: the
    models are built for the widest point, whose graphed steps cover every point's verify.) Each axis's
    values are points that differ from the first in that axis alone, so the axis to blame is named."""
    first = plans[0]
    changed = [[field for (field, value), (_, value0) in zip(point.values, points[0].values) if value != value0]
               for point, plan in zip(points, plans)
               if replace(plan.models, k=first.models.k) != first.models or plan.suite != first.suite]
    if not changed:
        return
    culprit = min(changed, key=len)
    axis = f"--{opt.BY_FIELD[culprit[0]].name}" if len(culprit) == 1 else "the axes " + ", ".join(culprit)
    raise UsageError(f"{axis} cannot be an axis here: it changes the models or prompts, which a sweep loads once "
                     "for every point; run one sweep per value")


def _print_frontier(frontier, console: Console, format: str, *, skipped: int) -> None:
    if format == "json":
        typer.echo(frontier.to_json(orient="records"))
        return
    table = Table(title="Throughput–latency per point (★ = on the method's Pareto frontier)", title_justify="left")
    for name in ("point", "method", "total decode tok/s", "request decode ms p50", "frontier"):
        table.add_column(name, justify="left" if name in ("point", "method") else "right")
    for _, row in frontier.sort_values(["method", "throughput_tokens_per_s"]).iterrows():
        table.add_row(row["point"], row["label"], f"{row['throughput_tokens_per_s']:.2f}", f"{row['latency_ms_p50']:.0f}",
                      "★" if row["on_frontier"] else "")
    console.print(table)
    if skipped:
        console.print(f"{skipped} point(s) were already complete and were not run again.")
