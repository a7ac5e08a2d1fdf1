"""`ssdbench run`: the methods side by side on one suite, every round recorded."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ssdbench.cli import endpoint_options
from ssdbench.cli import options as opt
from ssdbench.cli.errors import reports_errors
from ssdbench.cli.signals import signals_interrupt
from ssdbench.errors import UsageError
from ssdbench.records import strict_json

FORMATS = ("table", "json", "markdown")

if TYPE_CHECKING:
    from ssdbench.run.plan import RunPlan


def run_command(*, format: str = "table", **values) -> None:
    if format not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, got '{format}'")
    if values.get("num_prompts") is not None and values["num_prompts"] < 0:
        raise UsageError(f"--num-prompts must be >= 0, got {values['num_prompts']}")
    endpoint_values = {name: values.pop(name) for name in endpoint_options.FIELDS}
    from ssdbench.run.fit import fit_for
    from ssdbench.run.plan import build_plan  # here, not at the top: `ssdbench --help` stays free of torch

    settings = endpoint_options.run_settings(values, has_endpoints=bool(endpoint_values["endpoint"]))
    plan = build_plan(settings, fit=fit_for(settings))  # fit first (an earlier run, for --fan-out geometric), then plan
    endpoints = endpoint_options.endpoint_plan(endpoint_values, reserved=tuple(m.name for m in plan.methods))
    with signals_interrupt():
        if endpoints is None:
            perform_run(plan, format=format)
            return
        from ssdbench.endpoints.session import endpoints_ready

        with endpoints_ready(endpoints) as ready:  # launched servers stop when this block ends, however it ends
            perform_run(dataclasses.replace(plan, endpoints=ready), format=format)


run_command.__signature__ = opt.command_signature(
    [opt.run_parameter(o) for o in opt.RUN_OPTIONS] + endpoint_options.parameters()
    + [opt.inspect.Parameter("format", opt.inspect.Parameter.KEYWORD_ONLY, default="table", annotation=opt.RunFormat)])
run_command = reports_errors(run_command)


def perform_run(plan: RunPlan, *, format: str = "table") -> None:
    """Validate everything cheap, claim the run directory, run, print the summary."""
    from ssdbench.run import execute, session

    console = Console(stderr=format != "table")  # stdout carries the JSON or Markdown alone
    session.validate(plan)
    models, workload, suite_info = session.prepare(plan)
    try:
        limits = session.check_limits(plan, models, workload)
        session.calibrate_drafts(plan, models, workload)
        with progress_bar(console) as progress:
            task = progress.add_task("decoding", total=execute.count_units(plan, workload))
            outcome = session.run_point(plan, models, workload, suite_info,
                                        lambda label, n: progress.update(task, advance=n, description=label),
                                        limits=limits)
    finally:
        models.close()  # a tensor-parallel target's other ranks
    report_run(plan, outcome.path, outcome.recorder, console, format)
    if plan.endpoints is not None:
        endpoint_options.report_endpoints(outcome.recorder, console)


def progress_bar(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description:>14}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TimeRemainingColumn(), console=console, transient=True,
    )


def report_run(plan: RunPlan, path, recorder, console: Console, format: str) -> None:
    """The run's report, computed once (report/run_report.py), in the format asked for."""
    from ssdbench.report import run_views
    from ssdbench.report.run_report import build_run_report

    report = build_run_report(report_context(plan), path, recorder)
    if report is None:  # only endpoints ran and every request failed: report_endpoints says why
        console.print(f"no request finished; nothing to summarise (records in {path})")
        return
    if format == "json":
        for warning in report.warnings:  # on stderr, beside the JSON on stdout
            console.print(warning)
        typer.echo(strict_json.dumps(run_views.payload(report), default=float))
    elif format == "markdown":
        typer.echo(run_views.markdown(report), nl=False)
    else:
        run_views.print_table(report, console)




def report_context(plan: RunPlan):
    """What the run's report needs of its plan, and its warnings (report/run_report.py)."""
    from ssdbench.report.run_report import ReportContext

    decode = plan.decode
    return ReportContext(max_new_tokens=decode.max_new_tokens, k=decode.k, temperature=decode.target.temperature,
                         batch_size=decode.batch_size, acceptance=decode.acceptance, greedy=decode.greedy,
                         with_ssd=plan.ssd is not None, random_weights=plan.models.random_weights,
                         target_placement=plan.target_placement.spec, warnings=tuple(_synthetic_warning(plan)))


def _synthetic_warning(plan: RunPlan) -> list[str]:
    synthetic = plan.decode.synthetic
    if synthetic is None:
        return []
    affected = " and ".join(m.name for m in plan.methods if m.uses_draft and not m.is_baseline) or "no method here"
    hits = "" if synthetic.hit is None else f"; ssd's bonus steered onto its cache with probability {synthetic.hit:g}"
    return [f"[bold yellow]synthetic acceptance[/] ({synthetic.label}): {affected} accepted each drafted token "
            f"with probability {synthetic.rate:g}{hits}. Their outputs are NOT the target's; only the timings "
            "of rounds at that acceptance are real (ar and transformers' baselines are unaffected)."]
