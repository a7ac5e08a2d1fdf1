"""`ssdbench sweep`: a grid of runs over batch size, temperature, K and fan-out, models loaded once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from ssdbench.cli import options as opt
from ssdbench.cli.errors import reports_errors
from ssdbench.cli.signals import signals_interrupt
from ssdbench.config import DEFAULT_DRAFT, DEFAULT_ROUND_TIMEOUT_S, DEFAULT_TARGET, RunConfig
from ssdbench.errors import UsageError

SweepOut = Annotated[Path, typer.Option("--out", help="The sweep's folder: one run directory per point plus index.json. Re-running resumes.")]
BatchSizes = Annotated[str, typer.Option("--batch-sizes", help="Comma list, e.g. 1,2,4,8.")]
Temperatures = Annotated[str, typer.Option("--temperatures", help="Comma list, e.g. 0,0.7.")]
Lookaheads = Annotated[str, typer.Option("--k", help="Comma list of lookaheads K.")]
FanOuts = Annotated[Optional[str], typer.Option("--fan-out", help="Comma list of ssd fan-outs (integers or auto).")]


def _numbers(text: str, flag: str, kind):
    try:
        return [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"{flag} must be a comma list of numbers, got '{text}'") from None


@reports_errors
def sweep_command(
    out: SweepOut = Path("runs/sweep"),
    batch_sizes: BatchSizes = "1,2,4",
    temperatures: Temperatures = "0",
    k: Lookaheads = "4",
    fan_out: FanOuts = None,
    target: opt.Target = DEFAULT_TARGET,
    draft: opt.Draft = DEFAULT_DRAFT,
    suite: opt.Suite = "humaneval",
    methods: opt.Methods = "ar,sd",
    max_new_tokens: opt.MaxNewTokens = 64,
    ignore_eos: opt.IgnoreEos = False,
    truncate_prompts: opt.TruncatePrompts = "none",
    order: opt.Order = "interleaved",
    num_prompts: opt.NumPrompts = 8,
    repeats: opt.Repeats = 1,
    seed: opt.Seed = 0,
    device: opt.Device = "cpu",
    dtype: opt.Dtype = "float32",
    engine: opt.Engine = "native",
    threads: opt.Threads = None,
    linear_kernel: opt.LinearKernel = "auto",
    data_dir: opt.DataDir = None,
    chat_template: opt.ChatTemplate = True,
    target_device: opt.TargetDevice = None,
    draft_device: opt.DraftDevice = None,
    backup: opt.Backup = "jit",
    round_timeout_s: opt.RoundTimeout = DEFAULT_ROUND_TIMEOUT_S,
    trust_remote_code: opt.TrustRemoteCode = False,
    format: opt.Format = "table",
) -> None:
    from ssdbench.cli.run import split_list
    from ssdbench.sweep import grid

    base = RunConfig(
        target=target, draft=draft, suite=suite, methods=split_list(methods), max_new_tokens=max_new_tokens,
        ignore_eos=ignore_eos, order=order, num_prompts=num_prompts or None, repeats=repeats, seed=seed, device=device,
        dtype=dtype, engines=split_list(engine), threads=threads, linear_kernel=linear_kernel, data_dir=data_dir,
        chat_template=chat_template,
        target_device=target_device, draft_device=draft_device, backup=backup, timeline=False,
        round_timeout_s=round_timeout_s, trust_remote_code=trust_remote_code, truncate_prompts=truncate_prompts,
    )
    points = grid(_numbers(batch_sizes, "--batch-sizes", int), _numbers(temperatures, "--temperatures", float),
                  _numbers(k, "--k", int), split_list(fan_out) if fan_out else None)
    with signals_interrupt():
        perform_sweep(base, points, out, format=format)


def perform_sweep(base: RunConfig, points, sweep_dir: Path, *, format: str) -> None:
    import pandas as pd

    from ssdbench import benchmark, session
    from ssdbench.cli.run import progress_bar
    from ssdbench.records.reader import load_run
    from ssdbench.report.pareto import mark_pareto, throughput_latency
    from ssdbench.sweep import point_config, point_status, prepare_sweep_dir, set_aside, write_index

    configs = [point_config(base, p, sweep_dir) for p in points]  # validates every point's settings first
    for config in configs:
        session.validate(config)
    prepare_sweep_dir(sweep_dir)
    console = Console(stderr=format == "json")
    widest = max(configs, key=lambda c: c.k)  # prompts fitted once, to the point reaching furthest
    models, workload, suite_info = session.prepare(widest)  # loaded once for every point
    for config in configs:
        session.check_limits(config, models, workload)
    statuses = {p.name: point_status(sweep_dir / p.name) for p in points}
    write_index(sweep_dir, base, points, statuses)
    todo = [(p, c) for p, c in zip(points, configs) if statuses[p.name] != "complete"]
    with progress_bar(console) as progress:
        task = progress.add_task("sweep", total=sum(benchmark.count_units(c, workload) for _, c in todo))
        for point, config in todo:
            if statuses[point.name] != "absent":
                set_aside(sweep_dir / point.name)
            statuses[point.name] = "running"
            write_index(sweep_dir, base, points, statuses)
            try:
                session.run_point(config, models, workload, suite_info,
                                  lambda label, n, name=point.name: progress.update(task, advance=n,
                                                                                    description=f"{name} {label}"))
            finally:  # interrupted or failed: the index says so too, as the point's own manifest does
                statuses[point.name] = point_status(sweep_dir / point.name)
                write_index(sweep_dir, base, points, statuses)
    frames = []
    for point in points:
        run = load_run(sweep_dir / point.name)
        frame = throughput_latency(run.requests)
        frames.append(frame.assign(point=point.name))
    frontier = mark_pareto(pd.concat(frames, ignore_index=True))
    _print_frontier(frontier, console, format, skipped=len(points) - len(todo))


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
