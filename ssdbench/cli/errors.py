"""Known errors become one line on stderr and exit code 2; SSDBENCH_DEBUG=1 shows the traceback."""

from __future__ import annotations

import functools
import os
import signal

import typer

from ssdbench.cli.signals import Terminated
from ssdbench.errors import SsdbenchError

STOPPED_NOTE = "any run directory in use was marked interrupted, keeping the rounds measured so far"


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
        except Terminated as err:
            typer.echo(f"error: stopped by {err} ({STOPPED_NOTE})", err=True)
            raise typer.Exit(err.exit_code) from None
        except KeyboardInterrupt:  # Ctrl-C: one line too, and the shell's code for SIGINT
            typer.echo(f"error: stopped by SIGINT, Ctrl-C ({STOPPED_NOTE})", err=True)
            raise typer.Exit(128 + signal.SIGINT) from None
        except typer.Exit:
            raise
        except Exception as err:  # a bug, not the user's input: still one line, and how to see more
            if os.environ.get("SSDBENCH_DEBUG"):
                raise
            message = " ".join(str(err).split())
            typer.echo(f"error: internal error: {type(err).__name__}: {message} "
                       "(a run directory left unfinished was marked failed; SSDBENCH_DEBUG=1 shows the traceback)", err=True)
            raise typer.Exit(1) from None

    return wrapper
