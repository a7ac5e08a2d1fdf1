"""`ssdbench compare`: runs side by side, and a CI gate of candidate runs against a baseline run.

Exit codes: 0 all good (or no gate), 1 a gated metric regressed beyond its threshold (or,
with --strict, could not be decided), 2 unusable input (one line on stderr).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ssdbench.cli.errors import reports_errors
from ssdbench.errors import UsageError
from ssdbench.records import strict_json

FORMATS = ("table", "markdown", "json")
_STATUS_STYLE = {"FAIL": "bold red", "insufficient data": "bold yellow", "n/a": "dim"}

Runs = Annotated[list[Path], typer.Argument(help="Run directories (runs/<id>) to compare.", show_default=False)]
BaselineVariant = Annotated[Optional[str], typer.Option(
    "--baseline-variant", help="Variant speedups are measured against: RUN:label (e.g. 0:ar, 1:sd@hf) or a label "
    "(the first run holding it). Default: ar.")]
BaselineRun = Annotated[Optional[Path], typer.Option(
    "--baseline", help="Baseline run for CI gating: shown as run 0; every RUN is checked against it with --fail-on.")]
FailOn = Annotated[Optional[str], typer.Option(
    "--fail-on", help="Gate, METRIC:THRESHOLD[,...]: decode_tokens_per_s:-5%, speedup:-3%, ttft_ms:+10%, "
    "tpot_ms:+10%, acceptance_length:-2% (or :exact), draft_acceptance_rate, cache_hit_rate, outputs_match:false. "
    "Timed metrics fail only when the whole paired bootstrap CI lies beyond the threshold.")]
AllowMismatch = Annotated[bool, typer.Option(
    "--allow-mismatch", help="Compare runs that differ in weights, dtype, attention backend, hardware or suite "
    "content (the differences are printed above the table).")]
AllowMismatchIn = Annotated[Optional[str], typer.Option(
    "--allow-mismatch-in", help="Compare runs that differ only in these fields, comma list of: weights, dtype, "
    "attention, kernels, hardware, suite (e.g. hardware, for a gate on deterministic metrics run on another CPU).")]
Strict = Annotated[bool, typer.Option("--strict", help="Exit 1 when a check has too few paired prompts to decide.")]
MinPairs = Annotated[int, typer.Option("--min-pairs", help="Fewest paired prompts a check needs to decide.")]
Format = Annotated[str, typer.Option("--format", help="table, markdown (for a PR comment) or json.")]


@reports_errors
def compare_command(
    runs: Runs,
    baseline_variant: BaselineVariant = None,
    baseline: BaselineRun = None,
    fail_on: FailOn = None,
    allow_mismatch: AllowMismatch = False,
    allow_mismatch_in: AllowMismatchIn = None,
    strict: Strict = False,
    min_pairs: MinPairs = 5,
    format: Format = "table",
) -> None:
    from ssdbench.records.reader import load_run
    from ssdbench.report.compare import compare_runs, parse_allowed
    from ssdbench.report.gate import evaluate, exit_code, headline, parse_fail_on

    if format not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, got {format!r}")
    if min_pairs < 1:
        raise UsageError(f"--min-pairs must be >= 1, got {min_pairs}")
    allowed = parse_allowed(allow_mismatch_in)
    checks = parse_fail_on(fail_on) if fail_on is not None else None
    paths = [baseline, *runs] if baseline is not None else list(runs)
    if checks and len(paths) < 2:
        raise UsageError("--fail-on needs a baseline: pass --baseline RUN (or two runs: the first is the baseline)")
    loaded = [load_run(path, allow_partial=True) for path in paths]  # a partial run is labelled, never gated
    partial = [str(run.path) for run in loaded if run.partial]
    if checks and partial:
        raise UsageError(f"--fail-on needs complete runs: {', '.join(partial)} stopped early (partial); "
                         "compare it without --fail-on, or gate a complete run")
    comparison = compare_runs(loaded, baseline=baseline_variant, allow_mismatch=allow_mismatch, allowed=allowed)
    reports = _gated_reports(loaded) if checks else []
    verdicts = [v for i in range(1, len(reports)) for v in evaluate(reports[0], reports[i], checks, run=i,
                                                                    min_pairs=min_pairs)]
    code = exit_code(verdicts, is_strict=strict) if checks else None
    summary = headline(verdicts, is_strict=strict) if checks else None
    if format == "json":
        from ssdbench.report.markdown import to_payload

        typer.echo(strict_json.dumps(to_payload(comparison, verdicts, code), default=str))
    elif format == "markdown":
        from ssdbench.report.markdown import to_markdown

        typer.echo(to_markdown(comparison, verdicts, summary), nl=False)
    else:
        _print_table(comparison, verdicts, summary)
    if code:
        raise typer.Exit(code)


def _gated_reports(runs: list) -> list:
    """Each run's report (report/run_report.py), the one object `ssdbench run` printed: what the gate checks."""
    from ssdbench.report.run_report import report_of_run

    reports = [report_of_run(run) for run in runs]
    empty = [str(run.path) for run, report in zip(runs, reports) if report is None]
    if empty:
        raise UsageError(f"--fail-on: {', '.join(empty)} recorded no finished request; there is nothing to gate")
    return reports


def _print_table(comparison, verdicts, summary: str | None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from ssdbench.report.markdown import HEADERS, cells, run_lines
    from ssdbench.metrics.summary import SPEEDUP_NOTE

    console = Console()
    if not console.is_terminal and console.width < 240:  # pipes and CI logs: no wrapped cells
        console.width = 240
    for line in comparison.warnings:
        console.print(f"[bold yellow]warning:[/] {escape(line)}")
    for line in comparison.mismatches:
        console.print(f"[bold yellow]warning:[/] {escape(line)} (--allow-mismatch)")
    for index, run in enumerate(comparison.runs):
        if run.partial:
            console.print(f"[bold yellow]warning:[/] run {index} is PARTIAL ({escape(run.partial)}); its rows "
                          "cover only what it measured")
    title = "ssdbench compare · " + (f"speedup vs {comparison.baseline}" if comparison.baseline else "no baseline")
    table = Table(title=title, title_justify="left")
    for name in HEADERS:
        table.add_column(name, justify="left" if name in ("run", "variant") else "right", no_wrap=True)
    for _, row in comparison.rows.iterrows():
        table.add_row(*cells(row, comparison.baseline))
    console.print(table)
    for line in run_lines(comparison) + [SPEEDUP_NOTE] + comparison.notes:
        console.print(escape(line), style="dim")
    for v in verdicts:
        style = _STATUS_STYLE.get(v.status, "green")
        console.print(f"[{style}]{escape(v.status)}[/] {escape(v.check)} · run {v.run} {escape(v.variant)}: "
                      f"{escape(v.detail)}")
    if summary:
        console.print(f"[bold]{escape(summary)}[/]")
