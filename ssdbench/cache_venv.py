"""A tool installed once into a virtual environment of its own in ssdbench's cache (aiperf, vLLM's CPU
build): its own, because each pins packages unlike ssdbench's. An install counts only once its done-mark is
written, last, so an interrupted one is retried rather than used."""

from __future__ import annotations

import argparse
import subprocess
import sys
import venv
from collections.abc import Callable
from pathlib import Path

DONE_MARK = ".installed"


def installed_file(home: Path, relative: str) -> Path | None:
    """`home / relative` of a finished install, or None where it has not run or did not finish."""
    path = home / relative
    return path if (home / DONE_MARK).exists() and path.exists() else None


def create_with(home: Path, spec: str) -> Path:
    """A fresh venv at `home` with `spec` pip-installed into it; its python (not yet marked done)."""
    venv.create(home, with_pip=True, clear=True)
    python = home / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", spec], check=True)
    return python


def mark_done(home: Path, spec: str) -> None:
    (home / DONE_MARK).write_text(spec + "\n")


def installer_main(argv: list[str] | None, description: str, install: Callable[[], Path], spec: str,
                   home: Path) -> int:
    """An installer's command line: installs where missing and prints what it installed; 1 with one line on failure."""
    argparse.ArgumentParser(description=description).parse_args(argv)
    try:
        print(install())
    except (subprocess.CalledProcessError, OSError) as err:
        print(f"error: installing {spec} into {home} failed: {err}", file=sys.stderr)
        return 1
    return 0
