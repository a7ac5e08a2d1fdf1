"""`ssdbench run`: the methods side by side on one suite, every round recorded."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ssdbench.cli import options as opt
from ssdbench.cli.errors import reports_errors
from ssdbench.cli.signals import signals_interrupt
from ssdbench.config import DEFAULT_DRAFT, DEFAULT_ROUND_TIMEOUT_S, DEFAULT_TARGET, RunConfig
from ssdbench.errors import UsageError
from ssdbench.records import strict_json


def split_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


@reports_errors
def run_command(
    target: opt.Target = DEFAULT_TARGET,
    draft: opt.Draft = DEFAULT_DRAFT,
    suite: opt.Suite = "humaneval",
    methods: opt.Methods = "ar,sd",
    k: opt.Lookahead = 4,
    temperature: opt.Temperature = 0.0,
    draft_temperature: opt.DraftTemperature = None,
    top_p: opt.TopP = 1.0,
    batch_size: opt.BatchSize = 1,
    max_new_tokens: opt.MaxNewTokens = 64,
    ignore_eos: opt.IgnoreEos = False,
    truncate_prompts: opt.TruncatePrompts = "none",
    order: opt.Order = "interleaved",
    num_prompts: opt.NumPrompts = 8,
    repeats: opt.Repeats = 1,
    seed: opt.Seed = 0,
    device: opt.Device = "cpu",
    dtype: opt.Dtype = "float32",
    out: opt.Out = None,
    engine: opt.Engine = "native",
    attention: opt.Attention = "sdpa",
    linear_kernel: opt.LinearKernel = "auto",
    threads: opt.Threads = None,
    data_dir: opt.DataDir = None,
    chat_template: opt.ChatTemplate = True,
    allow_download: opt.AllowDownload = False,
    target_device: opt.TargetDevice = None,
    draft_device: opt.DraftDevice = None,
    fan_out: opt.FanOutOpt = "auto",
    fan_out_list: opt.FanOutList = None,
    fan_out_miss_list: opt.FanOutMissList = None,
    fit_from: opt.FitFrom = None,
    backup: opt.Backup = "jit",
    saguaro_c: opt.SaguaroC = 1.0,
    timeline: opt.Timeline = True,
    round_timeout_s: opt.RoundTimeout = DEFAULT_ROUND_TIMEOUT_S,
    trust_remote_code: opt.TrustRemoteCode = False,
    format: opt.Format = "table",
) -> None:
    if format not in ("table", "json"):
        raise UsageError(f"--format must be 'table' or 'json', got '{format}'")
    if num_prompts is not None and num_prompts < 0:
        raise UsageError(f"--num-prompts must be >= 0, got {num_prompts}")
    config = RunConfig(
        target=target, draft=draft, suite=suite, methods=split_list(methods), k=k, temperature=temperature,
        draft_temperature=draft_temperature, top_p=top_p, batch_size=batch_size, max_new_tokens=max_new_tokens,
        ignore_eos=ignore_eos, order=order, num_prompts=num_prompts or None, repeats=repeats, seed=seed, device=device,
        dtype=dtype, engines=split_list(engine), attention=attention, linear_kernel=linear_kernel, threads=threads,
        chat_template=chat_template,
        data_dir=data_dir, out=out, allow_download=allow_download, target_device=target_device,
        draft_device=draft_device, fan_out=fan_out, fan_out_list=fan_out_list, fan_out_miss_list=fan_out_miss_list,
        fit_from=fit_from, backup=backup, saguaro_c=saguaro_c, timeline=timeline, round_timeout_s=round_timeout_s,
        trust_remote_code=trust_remote_code, truncate_prompts=truncate_prompts,
    )
    with signals_interrupt():
        perform_run(config, format=format)


def perform_run(config: RunConfig, *, format: str = "table") -> None:
    """Validate everything cheap, claim the run directory, run, print the summary."""
    from ssdbench import benchmark, session

    console = Console(stderr=format == "json")
    session.validate(config)
    models, workload, suite_info = session.prepare(config)
    with progress_bar(console) as progress:
        task = progress.add_task("decoding", total=benchmark.count_units(config, workload))
        outcome = session.run_point(config, models, workload, suite_info,
                                    lambda label, n: progress.update(task, advance=n, description=label))
    report_run(config, outcome.path, outcome.recorder, console, format)


def progress_bar(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description:>14}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TimeRemainingColumn(), console=console, transient=True,
    )


def report_run(config: RunConfig, path, recorder, console: Console, format: str) -> None:
    import pandas as pd

    from ssdbench.report.render import exactness_line, print_summary
    from ssdbench.report.summary import summarize

    from ssdbench.report.ssd_summary import ssd_overview

    from ssdbench.records.reader import read_manifest
    from ssdbench.report.bandwidth_use import target_mbu

    steps, requests = pd.DataFrame(recorder.steps), pd.DataFrame(recorder.requests)
    summary = summarize(requests, steps)
    manifest = read_manifest(path)
    mbu = target_mbu(requests, weight_bytes=manifest.get("target_weight_bytes_per_forward"),
                     bandwidth_gbs=manifest.get("memory_read_bandwidth_gbs"))
    summary["target_mbu"] = summary["label"].map(mbu).astype(float)
    ssd = ssd_overview(steps) if "ssd" in config.methods else None
    greedy = config.temperature == 0
    if format == "json":
        payload = {"run_dir": str(path), "summary": summary.to_dict(orient="records"),
                   "ssd": [] if ssd is None else ssd.to_dict(orient="records"),
                   "exactness": exactness_line(summary, greedy=greedy), "prediction": _model_check_rows(path)}
        typer.echo(strict_json.dumps(payload, default=float))
        return
    title = (f"ssdbench run · {recorder.requests['suite'][0]} · {summary['num_requests'].iloc[0]} requests × "
             f"≤{config.max_new_tokens} new tokens · K={config.k} · T={config.temperature} · batch {config.batch_size}")
    print_summary(summary, title=title, greedy=greedy, console=console, ssd=ssd)
    if manifest.get("memory_read_bandwidth_gbs"):
        spread = manifest.get("memory_read_bandwidth") or {}
        band = f", passes p10-p90 {spread['p10_gbs']:.1f}-{spread['p90_gbs']:.1f}" if "p10_gbs" in spread else ""
        console.print(f"target MBU: target weight bytes per forward × forwards/s ÷ measured read bandwidth "
                      f"({manifest['memory_read_bandwidth_gbs']:.1f} GB/s median{band} on {torch_device_name(config)}).")
    if manifest.get("kernels"):
        used = "; ".join(f"{role}: {k.get('linear')}, {k.get('attention')}" for role, k in manifest["kernels"].items())
        console.print(f"kernels (probed here): {used}")
    _print_model_check(path, console)
    console.print(f"Records: {path}")


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


def torch_device_name(config: RunConfig) -> str:
    return config.target_device or config.device
