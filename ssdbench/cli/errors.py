"""Known errors become one line on stderr and exit code 2; SSDBENCH_DEBUG=1 shows the traceback."""

from __future__ import annotations

import functools
import os

import typer

from ssdbench.errors import SsdbenchError


def reports_errors(command):
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except SsdbenchError as err:
            if os.environ.get("SSDBENCH_DEBUG"):
                raise
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(err.exit_code) from None

    return wrapper
