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

if TYPE_CHECKING:
    from ssdbench.run.plan import RunPlan


def run_command(*, format: str = "table", **values) -> None:
    if format not in ("table", "json"):
        raise UsageError(f"--format must be 'table' or 'json', got '{format}'")
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
    + [opt.inspect.Parameter("format", opt.inspect.Parameter.KEYWORD_ONLY, default="table", annotation=opt.Format)])
run_command = reports_errors(run_command)


def perform_run(plan: RunPlan, *, format: str = "table") -> None:
    """Validate everything cheap, claim the run directory, run, print the summary."""
    from ssdbench.run import execute, session

    console = Console(stderr=format == "json")
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
    import pandas as pd

    from ssdbench.report.render import exactness_line, print_summary
    from ssdbench.metrics.summary import summarize

    from ssdbench.report.ssd_summary import chain_against_verify, chain_lines, ssd_overview

    from ssdbench.records.reader import read_manifest
    from ssdbench.metrics.energy import joules_per_token
    from ssdbench.report.bandwidth_use import target_mbu

    steps, requests = pd.DataFrame(recorder.steps), pd.DataFrame(recorder.requests)
    if requests.empty:  # only endpoints ran and every request failed: report_endpoints says why
        console.print(f"no request finished; nothing to summarise (records in {path})")
        return
    summary = summarize(requests, steps)
    if recorder.endpoints:  # serving engines' acceptance, tokens per target pass and identity judged on text
        from ssdbench.endpoints.table import with_endpoint_figures

        summary = with_endpoint_figures(summary, pd.DataFrame(recorder.endpoints), requests, steps)
    manifest = read_manifest(path)
    mbu = target_mbu(requests, weight_bytes=manifest.get("target_weight_bytes_per_forward"),
                     bandwidth_gbs=manifest.get("memory_read_bandwidth_gbs"))
    summary["target_mbu"] = summary["label"].map(mbu).astype(float)
    energy = joules_per_token(steps, requests, _gpu_samples(path))
    if energy:  # GPUs were sampled: joules per generated token, every sampled GPU together
        summary["joules_per_token"] = summary["label"].map(energy).astype(float)
    ssd = ssd_overview(steps) if plan.ssd is not None else None
    chain = (chain_against_verify(steps, pd.DataFrame(recorder.events), plan.decode.k)
             if plan.ssd is not None else None)
    greedy = plan.decode.greedy
    if plan.decode.synthetic is not None:  # always, whatever the models and the format (stderr with json)
        _print_synthetic(plan, console)
    if format == "json":
        payload = {"run_dir": str(path), "acceptance": plan.decode.acceptance,
                   "summary": summary.to_dict(orient="records"),
                   "ssd": [] if ssd is None else ssd.to_dict(orient="records"), "ssd_chain": chain,
                   "exactness": exactness_line(summary, greedy=greedy, divergences=manifest.get("greedy_divergences")),
                   "greedy_divergences": manifest.get("greedy_divergences"), "prediction": _model_check_rows(path)}
        typer.echo(strict_json.dumps(payload, default=float))
        return
    title = (f"ssdbench run · {recorder.requests['suite'][0]} · {summary['num_requests'].iloc[0]} requests × "
             f"≤{plan.decode.max_new_tokens} new tokens · K={plan.decode.k} · T={plan.decode.target.temperature} · "
             f"batch {plan.decode.batch_size}")
    print_summary(summary, title=title, greedy=greedy, console=console, ssd=ssd,
                  divergences=manifest.get("greedy_divergences"))
    for line in chain_lines(chain):
        console.print(line)
    if manifest.get("memory_read_bandwidth_gbs"):
        spread = manifest.get("memory_read_bandwidth") or {}
        band = f", passes p10-p90 {spread['p10_gbs']:.1f}-{spread['p90_gbs']:.1f}" if "p10_gbs" in spread else ""
        console.print(f"target MBU: target weight bytes per forward × forwards/s ÷ measured read bandwidth "
                      f"({manifest['memory_read_bandwidth_gbs']:.1f} GB/s median{band} on {plan.target_placement.spec}).")
        if (summary["target_mbu"] > 1).any():
            console.print("MBU above 100%: decoding read the weights faster than the bandwidth probe read memory "
                          "before the run; the machine's bandwidth varies (see the probe's spread), so read MBU "
                          "as approximate here.")
    if manifest.get("kernels"):
        used = "; ".join(f"{role}: {k.get('linear')}, {k.get('attention')}"
                         + _fused_note(k.get("decode_step"))
                         for role, k in manifest["kernels"].items())
        console.print(f"kernels (probed here): {used}")
    if plan.models.random_weights:
        console.print("[bold yellow]random weights[/]: published shapes with random weights (--random-weights); the "
                      "timings are the shapes', the outputs and acceptance are no real model's.")
    if plan.decode.synthetic is not None:
        _print_synthetic(plan, console)
    _print_self_skip(manifest, console)
    _print_model_check(path, console)
    console.print(f"Records: {path}")


def _gpu_samples(path):
    """The run's NVML samples (gpu.parquet), empty where none were taken."""
    import pandas as pd
    import pyarrow.parquet as pq

    file = path / "gpu.parquet"
    return pq.read_table(file).to_pandas() if file.is_file() else pd.DataFrame()


def _print_synthetic(plan: RunPlan, console: Console) -> None:
    synthetic = plan.decode.synthetic
    affected = " and ".join(m.name for m in plan.methods if m.uses_draft and not m.is_baseline) or "no method here"
    hits = "" if synthetic.hit is None else f"; ssd's bonus steered onto its cache with probability {synthetic.hit:g}"
    console.print(f"[bold yellow]synthetic acceptance[/] ({synthetic.label}): {affected} accepted each drafted token "
                  f"with probability {synthetic.rate:g}{hits}. Their outputs are NOT the target's; only the timings "
                  "of rounds at that acceptance are real (ar and transformers' baselines are unaffected).")


def _print_self_skip(manifest: dict, console: Console) -> None:
    """Which layers the self-skip draft left out, and (auto) what the calibration expected of them."""
    skip = manifest.get("models", {}).get("draft", {}).get("self_skip")
    if not skip:
        return
    if "alpha" not in skip:
        console.print(f"self-skip draft: layers {skip['layers']} skipped (given in --draft).")
        return
    line = (f"self-skip draft: layers {skip['layers']} skipped, chosen by calibration on {skip['calibration_tokens']} "
            f"prompt tokens in {skip['seconds']:.1f} s: greedy agreement {skip['alpha']:.2f}, cost {skip['cost_ratio']:.2f} "
            f"of the target, predicted sd speedup {skip['predicted_speedup']:.2f}×")
    if skip["predicted_speedup"] < 1:
        line += " [yellow](below 1: no skip set tried is expected to pay off on this target)[/]"
    console.print(line)


def _model_check_rows(path) -> list[dict]:
    """Predicted (or accounting-checked) speedups beside the measured ones, from the records just written."""
    from ssdbench.projection import check_rows, measure_run
    from ssdbench.records.reader import load_run

    run = load_run(path)
    return check_rows(measure_run(run)) if not run.steps.empty else []


def _print_model_check(path, console: Console) -> None:
    from ssdbench.report.render import model_check_table

    rows = _model_check_rows(path)
    if any(row["label"] != "ar" for row in rows) and any(row["label"] == "ar" for row in rows):
        console.print(model_check_table(rows))


def _fused_note(decode_step: str | None) -> str:
    """The kernels line's word on decode_layer.c: every step fused, or only those below a row count."""
    if not decode_step:
        return ""
    return ", fused steps" if decode_step == "fused" else f", fused steps ({decode_step.removeprefix('fused')})"
