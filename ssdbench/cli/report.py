"""`ssdbench report`: figures and one HTML page from one or more run directories."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from ssdbench.cli.errors import reports_errors
from ssdbench.errors import RunDirectoryError

Runs = Annotated[list[Path], typer.Argument(help="Run directories (from `ssdbench run`; several give a throughput–latency frontier), or one `reproduce` folder.", show_default=False)]
ReportOut = Annotated[Optional[Path], typer.Option("--out", help="Folder for the PNGs and report.html (default: <first run>/report/).")]


def prepare_out(out: Path) -> None:
    """Create `out` (or accept an existing folder); one-line RunDirectoryError if it cannot be written."""
    if out.exists() and not out.is_dir():
        raise RunDirectoryError(f"cannot write the report to {out}: it exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RunDirectoryError(f"cannot create report folder {out}: {err.strerror or err}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise RunDirectoryError(f"cannot write the report to {out}: permission denied")


@reports_errors
def report_command(runs: Runs, out: ReportOut = None) -> None:
    from ssdbench.records.reader import load_run
    from ssdbench.report.findings_page import is_findings_dir
    from ssdbench.report.html import write_report

    if len(runs) == 1 and is_findings_dir(runs[0]):  # a `reproduce` folder: its findings and studies
        report_findings(runs[0], out)
        return
    loaded = [load_run(path, allow_partial=True) for path in runs]  # a run that stopped early: labelled partial
    for run in loaded:
        if run.requests.empty:
            raise RunDirectoryError(f"{run.path} has no requests: nothing to report")
    for run in loaded:
        if run.partial:
            typer.echo(f"  partial run {run.path}: {run.partial}")
    write_and_list(lambda folder: write_report(loaded, folder), out or Path(runs[0]) / "report")


def report_findings(folder: Path, out: Optional[Path]) -> None:
    from ssdbench.report.findings_page import write_findings_report

    write_and_list(lambda into: write_findings_report(folder, into), out or Path(folder) / "report")


def write_and_list(write, out: Path) -> None:
    """`write(out)` -> (page, plots) into a folder made ready for it; then each figure and the page."""
    prepare_out(out)
    try:
        page, plots = write(out)
    except OSError as err:
        raise RunDirectoryError(f"cannot write the report to {out}: {err.strerror or err}") from None
    for plot in plots:
        typer.echo(f"  {plot.path}" if plot.path else f"  skipped {plot.name}: {plot.reason}")
    typer.echo(f"Report: {page}")
