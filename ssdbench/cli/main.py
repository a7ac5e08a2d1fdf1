"""The `ssdbench` command: a thin Typer layer over the library."""

from __future__ import annotations

import typer

from ssdbench.cli.run import run_command

app = typer.Typer(
    name="ssdbench",
    help="Benchmark and profile LLM decoding: autoregressive (ar), speculative (sd) and speculative speculative (ssd).",
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("run", help="Run the methods on a suite and record every round to Parquet.")(run_command)


@app.callback()
def _root() -> None:
    """ssdbench: exact, measured comparisons of decoding methods."""


def main() -> None:
    app()
