"""`ssdbench serve`: one method (ar, sd or ssd) behind an OpenAI-compatible server (ssdbench/serve/).

Takes `run`'s options for the models, decoding, ssd and hardware (declared once, in options.py), so
the engine, kernels, devices and ssd's draft process are the ones `run` uses; the options that pick
prompts or shape a benchmark (suite, methods, batch size, order, ...) have no meaning for a server and
are left out. --max-new-tokens, --temperature and --top-p are the defaults of a request that does not
say; --max-batch is the batch size.
"""

from __future__ import annotations

import inspect
from typing import Annotated, Optional

import typer

from ssdbench.cli import options as opt
from ssdbench.cli.errors import reports_errors
from ssdbench.cli.signals import signals_interrupt
from ssdbench.errors import UsageError

SERVER = "Server"
NOT_FOR_A_SERVER = ("suite", "num_prompts", "repeats", "chat_template", "truncate_prompts", "data_dir", "methods",
                    "batch_size", "order", "acceptance", "timeline", "engines")
SERVE_OPTIONS = tuple(o for o in opt.RUN_OPTIONS if o.field not in NOT_FOR_A_SERVER)
METHODS = ("ar", "sd", "ssd")

Method = Annotated[str, typer.Option("--method", help="ar, sd or ssd.", rich_help_panel=SERVER)]
Host = Annotated[str, typer.Option("--host", help="Address to listen on.", rich_help_panel=SERVER)]
Port = Annotated[int, typer.Option("--port", help="Port to listen on.", rich_help_panel=SERVER)]
MaxBatch = Annotated[int, typer.Option("--max-batch", help="Requests decoded together at most (static batches).",
                                       rich_help_panel=SERVER)]
ModelName = Annotated[Optional[str], typer.Option("--served-model-name", help="The model's name in the API "
                                                  "(default: the target's).", rich_help_panel=SERVER)]
GreedyOnly = Annotated[bool, typer.Option("--greedy-only", help="Refuse temperature > 0 (sd/ssd drafts then "
                                          "send no distributions).", rich_help_panel=SERVER)]
Grace = Annotated[float, typer.Option("--grace-s", help="On SIGINT/SIGTERM, how long requests in flight may "
                                      "finish before they are ended.", rich_help_panel=SERVER)]
LogLevel = Annotated[str, typer.Option("--log-level", help="uvicorn's: warning, info (one line per request), ...",
                                       rich_help_panel=SERVER)]


def serve_command(*, method: str = "ssd", host: str = "127.0.0.1", port: int = 8000, max_batch: int = 1,
                  served_model_name: Optional[str] = None, greedy_only: bool = False, grace_s: float = 30.0,
                  log_level: str = "warning", **values) -> None:
    if method not in METHODS:
        raise UsageError(f"--method must be one of {', '.join(METHODS)}, got '{method}'")
    if not 0 < port < 65536:
        raise UsageError(f"--port must be from 1 to 65535, got {port}")
    if max_batch < 1:
        raise UsageError(f"--max-batch must be at least 1, got {max_batch}")
    if grace_s < 0:
        raise UsageError(f"--grace-s must be >= 0, got {grace_s:g}")
    from ssdbench.run.fit import fit_for
    from ssdbench.run.plan import build_plan
    from ssdbench.run.settings import RunSettings
    from ssdbench.serve.server import ServeOptions, serve

    settings = RunSettings(**{f: opt.BY_FIELD[f].to_setting(v) for f, v in values.items()}, methods=(method,),
                           batch_size=max_batch, suite="serve")  # the records' suite: requests to the server
    plan = build_plan(settings, fit=fit_for(settings))
    if plan.out is not None:
        from ssdbench.records.writer import refuse_inside_run

        refuse_inside_run(plan.out)
    options = ServeOptions(host=host, port=port, max_batch=max_batch, model_name=served_model_name,
                           greedy_only=greedy_only, grace_s=grace_s, log_level=log_level)
    with signals_interrupt():  # SIGTERM reaches uvicorn's graceful shutdown, then ends the command like Ctrl-C
        path = serve(plan, options, on_event=lambda line: typer.echo(line, err=True))
    typer.echo(f"Records: {path}", err=True)


def _parameter(name: str, default, annotation) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


serve_command.__signature__ = opt.command_signature(
    [_parameter("method", "ssd", Method), _parameter("host", "127.0.0.1", Host), _parameter("port", 8000, Port),
     _parameter("max_batch", 1, MaxBatch), _parameter("served_model_name", None, ModelName),
     _parameter("greedy_only", False, GreedyOnly), _parameter("grace_s", 30.0, Grace),
     _parameter("log_level", "warning", LogLevel)]
    + [opt.run_parameter(o) for o in SERVE_OPTIONS])
serve_command = reports_errors(serve_command)
