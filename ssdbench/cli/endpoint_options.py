"""`ssdbench run`'s options for serving engines (--endpoint and friends), and the lines it prints about
them after the summary. Kept out of options.RUN_OPTIONS: a sweep loads its models once and has no
servers to start or stop."""

from __future__ import annotations

import inspect
from typing import Annotated, Any, List, Optional

import typer

from ssdbench.cli.options import SERVING
from ssdbench.errors import RunFailed

FIELDS = ("endpoint", "endpoint_launch", "endpoint_model", "endpoint_api", "concurrency", "request_timeout_s",
          "endpoint_ready_timeout_s", "endpoint_api_key_env")
MAX_FAILURES_SHOWN = 3


def parameters() -> list[inspect.Parameter]:
    def option(name: str, default: Any, annotation) -> inspect.Parameter:
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)

    def flag(*names: str, help: str, metavar: str | None = None):
        return typer.Option(*names, help=help, metavar=metavar, rich_help_panel=SERVING)

    # One line of help each; docs/options.md has the detail.
    return [
        option("endpoint", None, Annotated[Optional[List[str]], flag(
            "--endpoint", help="NAME=URL of an OpenAI-compatible server to run the suite against; repeatable.",
            metavar="<name=url>")]),
        option("endpoint_launch", None, Annotated[Optional[List[str]], flag(
            "--endpoint-launch", help="NAME='command': start that server, stop it after the run.",
            metavar="<name=cmd>")]),
        option("endpoint_model", None, Annotated[Optional[List[str]], flag(
            "--endpoint-model", help="NAME=MODEL to ask for (default: the one it lists).",
            metavar="<name=model>")]),
        option("endpoint_api", None, Annotated[Optional[List[str]], flag(
            "--endpoint-api", help="completions (our token ids) or chat; [NAME=]API.",
            metavar="<[name=]api>")]),
        option("concurrency", "1", Annotated[str, flag(
            "--concurrency", help="Requests in flight per endpoint: a comma list, e.g. 1,8,32.")]),
        option("request_timeout_s", 300.0, Annotated[float, flag(
            "--request-timeout-s", help="Fail a request not done within this many seconds.")]),
        option("endpoint_ready_timeout_s", 300.0, Annotated[float, flag(
            "--endpoint-ready-timeout-s", help="How long a launched server may take to start.")]),
        option("endpoint_api_key_env", None, Annotated[Optional[str], flag(
            "--endpoint-api-key-env", help="Environment variable holding the API key (never recorded).")]),
    ]


def run_settings(values: dict, *, has_endpoints: bool):
    """The run's settings; `--methods none` (serving engines only) needs an --endpoint."""
    from ssdbench.cli import options as opt
    from ssdbench.errors import UsageError
    from ssdbench.run.settings import RunSettings

    if values["methods"].strip() != "none":
        return opt.settings_from_values(values)
    if not has_endpoints:
        raise UsageError("--methods none runs no method: give at least one --endpoint NAME=URL")
    converted = {field: opt.BY_FIELD[field].to_setting(value) for field, value in values.items() if field != "methods"}
    return RunSettings(**converted, methods=(), endpoints_only=True)


def endpoint_plan(values: dict, *, reserved: tuple[str, ...]):
    from ssdbench.endpoints.spec import parse_endpoint_plan

    return parse_endpoint_plan(
        list(values["endpoint"] or ()), list(values["endpoint_launch"] or ()), list(values["endpoint_model"] or ()),
        apis=list(values["endpoint_api"] or ()), concurrency=values["concurrency"],
        request_timeout_s=values["request_timeout_s"],
        ready_timeout_s=values["endpoint_ready_timeout_s"], api_key_env=values["endpoint_api_key_env"],
        reserved=reserved)


def report_endpoints(recorder, console) -> None:
    """Per endpoint variant, the acceptance it reported; then every failed request makes the run exit 1."""
    import pandas as pd

    from ssdbench.endpoints.runner import failures
    from ssdbench.endpoints.summary import (acceptance_lines, cached_prompt_warnings, model_warnings,
                                            prompt_token_warnings)

    endpoints = pd.DataFrame(recorder.endpoints)
    warnings = (prompt_token_warnings(endpoints, pd.DataFrame(recorder.requests)) + model_warnings(endpoints)
                + cached_prompt_warnings(endpoints))
    for line in acceptance_lines(endpoints) + warnings:
        console.print(line, markup=False)  # "[from ...]" is text, not a Rich style tag
    failed = failures(recorder)
    if failed:
        shown = "; ".join(failed[:MAX_FAILURES_SHOWN]) + (" ..." if len(failed) > MAX_FAILURES_SHOWN else "")
        raise RunFailed(f"{len(failed)} endpoint request(s) failed (recorded as failed in endpoints.parquet, the "
                        f"others kept): {shown}")
