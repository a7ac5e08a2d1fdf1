"""`run --help` and `sweep --help` read at 80 columns: options in named panels, one line of help each, the
detail of every option in docs/options.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from ssdbench.cli.main import app
from ssdbench.cli.options import PANELS, SERVING

runner = CliRunner()
OPTIONS_DOC = Path(__file__).resolve().parents[2] / "docs" / "options.md"


def help_text(command: str, columns: int = 80) -> str:
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output


def flags(command: str) -> list[str]:
    """Every long flag of the command but --help."""
    params = typer.main.get_command(app).commands[command].params
    return [o for p in params for o in (*p.opts, *p.secondary_opts) if o.startswith("--") and o != "--help"]


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_help_fits_80_columns_in_at_most_200_lines(command):
    lines = help_text(command).splitlines()
    assert len(lines) <= 200, len(lines)
    assert max(len(line) for line in lines) <= 80


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_options_sit_in_named_panels_in_the_house_order(command):
    text = help_text(command)
    titles = re.findall(r"╭─ (.+?) ─", text)
    expected = [p for p in PANELS if command == "run" or p != SERVING]  # a sweep starts no servers
    assert [t for t in titles if t in PANELS] == expected  # every panel, in order
    general = text.split("╭─ Options ")[1].split("╰")[0]
    assert re.findall(r"│ (--[\w-]+)", general) == ["--help"]  # nothing left in the catch-all panel


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_each_option_has_one_short_line_of_help(command):
    params = typer.main.get_command(app).commands[command].params
    for param in params:
        assert param.help and "\n" not in param.help and len(param.help) <= 100, (param.opts, param.help)


def test_every_option_of_run_and_sweep_is_detailed_in_docs_options():
    documented = set(re.findall(r"--[\w-]+", OPTIONS_DOC.read_text()))
    missing = sorted((set(flags("run")) | set(flags("sweep"))) - documented)
    assert not missing, f"docs/options.md lacks {missing}"
