"""`ssdbench reproduce`: the SSD paper's findings checked on the user's pair, one sweep folder per study,
and one table of verdicts (DIR/findings.parquet)."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from ssdbench.cli import options as opt
from ssdbench.cli.errors import reports_errors
from ssdbench.cli.signals import signals_interrupt
from ssdbench.errors import UsageError

REPRODUCE = "Reproduce"
QUICK = {"num_prompts": 6, "max_new_tokens": 48}  # --quick: every study on the embedded pair in minutes
FORMATS = ("table", "json", "markdown")

Studies = Annotated[Optional[list[str]], typer.Argument(help="Studies to run (default: all; --list names them).",
                                                        show_default=False)]
ListStudies = Annotated[bool, typer.Option("--list", help="Print the studies and the paper's claims; run nothing.",
                                           rich_help_panel=REPRODUCE)]
Out = Annotated[Path, typer.Option("--out", help="The folder: one sweep folder per study, findings.parquet.",
                                   rich_help_panel=REPRODUCE)]
Quick = Annotated[bool, typer.Option("--quick", help="Reduced sizes: 6 prompts x 48 tokens, fewer points.",
                                     rich_help_panel=REPRODUCE)]
ShardOption = Annotated[Optional[str], typer.Option("--shard", help="Run slice I/N of every study (join with "
                        "`ssdbench merge`, per study).", rich_help_panel=REPRODUCE)]
Format = Annotated[str, typer.Option("--format", help="table, json or markdown.", rich_help_panel=opt.OUTPUT)]
REPRODUCE_OPTIONS = tuple(o for o in opt.RUN_OPTIONS if o.field != "out")


def reproduce_command(*, studies: Optional[list[str]] = None, list_studies: bool = False,
                      out: Path = Path("runs/reproduce"), quick: bool = False, shard: Optional[str] = None,
                      format: str = "table", **values) -> None:
    from ssdbench.reproduce.registry import STUDIES, select

    if format not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, got '{format}'")
    chosen = select(list(studies or []))
    if list_studies:
        print_study_list(STUDIES)
        return
    from ssdbench.run.sweep_shard import parse_shard

    part = parse_shard(shard) if shard is not None else None
    base = user_settings(values, quick=quick, out=out)
    console = Console(stderr=format != "table")  # json and markdown alone on stdout
    with signals_interrupt():
        for study in chosen:
            run_study(study, base, quick, part, console)
    if part is not None:
        console.print(f"shard {shard} done; merge each study's folders (`ssdbench merge`), then run `ssdbench "
                      f"reproduce` on the merged folder for the findings")
        return
    findings = judge_studies(chosen, base, quick)
    from ssdbench.reproduce.findings import write_findings

    path = write_findings(out, findings)
    print_findings(findings, format, console)
    console.print(f"Findings: {path}")


reproduce_command.__signature__ = opt.command_signature(
    [inspect.Parameter("studies", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Studies),
     inspect.Parameter("list_studies", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=ListStudies),
     inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=Path("runs/reproduce"), annotation=Out),
     inspect.Parameter("quick", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=Quick),
     inspect.Parameter("shard", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=ShardOption)]
    + [opt.run_parameter(o) for o in REPRODUCE_OPTIONS]
    + [inspect.Parameter("format", inspect.Parameter.KEYWORD_ONLY, default="table", annotation=Format)])
reproduce_command = reports_errors(reproduce_command)


def user_settings(values: dict, *, quick: bool, out: Path):
    """The user's run settings; --quick shrinks what was left at its default. `out` is the reproduce folder
    (each study's sweep gives its points folders of their own)."""
    settings = opt.settings_from_values(values)
    if quick:
        defaults = {f.name: f.default for f in dataclasses.fields(settings)}
        settings = dataclasses.replace(settings, **{k: v for k, v in QUICK.items()
                                                    if getattr(settings, k) == defaults[k]})
    return dataclasses.replace(settings, out=out, timeline=False)


def run_study(study, base, quick: bool, shard, console: Console) -> None:
    from ssdbench.cli.sweep import perform_sweep
    from ssdbench.reproduce.registry import NEEDS
    from ssdbench.reproduce.study import study_base
    from ssdbench.run.sweep import grid

    if shard is not None and study.name in NEEDS:
        console.print(f"[yellow]{study.name}[/]: left to the unsharded step after the merge (it reads "
                      f"{', '.join(NEEDS[study.name])}'s merged records)")
        return
    for sweep in study.sweeps(base, quick):
        if sweep.skipped:
            console.print(f"[yellow]{study.name}[/]: {sweep.folder} not run: {sweep.skipped}")
            continue
        settings = study_base(base, sweep)
        points = grid(settings, sweep.axes)
        if shard is not None and len(points) < shard.count:
            console.print(f"[yellow]{study.name}[/]: {len(points)} point(s), fewer than the {shard.count} shards: "
                          "left to the unsharded step after the merge")
            continue
        if shard is None and already_complete(settings, points, base.out / sweep.folder):
            console.print(f"[bold]{study.name}[/]: {len(points)} points in {base.out / sweep.folder}, all complete")
            continue
        console.print(f"[bold]{study.name}[/]: {len(points)} points into {base.out / sweep.folder}")
        perform_sweep(settings, points, base.out / sweep.folder, format="table", shard=shard, show_frontier=False)


def already_complete(settings, points, sweep_dir: Path) -> bool:
    """Every point recorded complete with these very settings (a folder made with others is refused, as a
    resumed sweep's is): nothing to run, and no models to load."""
    from ssdbench.run.sweep import index_entry, point_status
    from ssdbench.run.sweep_index import open_index

    if not all(point_status(sweep_dir / p.name) == "complete" for p in points):
        return False
    open_index(sweep_dir, settings, [index_entry(p) for p in points])  # raises on other settings
    return True


def judge_studies(chosen, base, quick: bool) -> list:
    from ssdbench.reproduce.study import load_study

    findings = []
    for study in chosen:
        findings += study.judge(load_study(base.out, study.sweeps(base, quick), base))
    return findings


def print_study_list(studies) -> None:
    table = Table(title="Studies (the paper: arXiv 2603.03251)", title_justify="left")
    for column in ("study", "the paper's claim", "run at"):
        table.add_column(column, overflow="fold")
    for study in studies:
        table.add_row(study.name, f"{study.claim} ({study.paper})", study.why)
    Console().print(table)


def print_findings(findings, format: str, console: Console) -> None:
    from ssdbench.records import strict_json
    from ssdbench.reproduce.findings import format_figure, markdown_table

    if format == "json":
        typer.echo(strict_json.dumps([f.row() for f in findings], indent=2))
        return
    if format == "markdown":
        typer.echo(markdown_table(findings))
        return
    table = Table(title="Findings", title_justify="left")
    for column in ("study", "claim: what is measured", "figure [95% CI]", "verdict", "why"):
        table.add_column(column, overflow="fold")
    colour = {"holds": "green", "does not hold": "red", "inconclusive": "yellow"}
    for f in findings:
        table.add_row(f.study, f"{f.claim}: [dim]{f.measured}[/]", format_figure(f),
                      f"[{colour[f.verdict]}]{f.verdict}[/]", f.reason)
    console.print(table)
