"""The `ssdbench` command: a thin Typer layer over the library."""

from __future__ import annotations

import typer

from ssdbench.cli.compare import compare_command
from ssdbench.cli.export import export_command
from ssdbench.cli.inspect import ls_command, validate_command
from ssdbench.cli.merge import merge_command
from ssdbench.cli.project import project_command
from ssdbench.cli.report import report_command
from ssdbench.cli.reproduce import reproduce_command
from ssdbench.cli.run import run_command
from ssdbench.cli.serve import serve_command
from ssdbench.cli.sweep import sweep_command

app = typer.Typer(
    name="ssdbench",
    help="Benchmark and profile LLM decoding: autoregressive (ar), speculative (sd) and speculative speculative (ssd).",
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("run", help="Run the methods on a suite and record every round to Parquet.")(run_command)
app.command("sweep", help="Run a grid of decoding settings with the models loaded once; resumable. An option whose "
                          "value reads <int,...> (or <float,...>, <str,...>) takes a comma list, an axis of the sweep: "
                          "every combination runs. The others take one value for the whole sweep.")(
    sweep_command)
app.command("reproduce", help="Check the SSD paper's findings on this pair and hardware: one sweep per study, then "
                              "a verdict per claim (holds, does not hold, inconclusive) from the recorded rounds. "
                              "Each study sets what it studies (methods, temperature, fan-out, C, backup, batch "
                              "size); every other run option is yours. docs/reproduce.md has the details.")(
    reproduce_command)
app.command("serve", help="Serve one method (ar, sd or ssd) behind an OpenAI-compatible HTTP server, every request "
                          "and round recorded as `run` records them (docs/serve.md).")(serve_command)
app.command("merge", help="Join the folders of a sweep run as shards (sweep --shard I/N) into one sweep.")(merge_command)
app.command("compare", help="Compare runs side by side; gate a run against a baseline in CI.")(compare_command)
app.command("export", help="Write a run's answers in Spec-Bench's model-answer layout (--format specbench).")(
    export_command)
app.command("ls", help="List methods, engines, attention backends, suites, models and packages.")(ls_command)
app.command("validate", help="Check that a target/draft pair resolves, shares a vocabulary and fits; runs nothing.")(
    validate_command)
app.command("report", help="Figures and one HTML page (PNG + summary table) from one or more runs.")(report_command)
app.command("project", help="Predicted vs measured speedups on the run's hardware; projected tokens/s on other GPUs.")(
    project_command)


@app.callback()
def _root() -> None:
    """ssdbench: exact, measured comparisons of decoding methods."""


def main() -> None:
    app()
