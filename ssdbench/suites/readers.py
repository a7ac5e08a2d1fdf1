"""Read raw records from prompt files (JSONL, gzipped JSONL, a JSON array, Parquet).

Each record comes with a `where` string ("<file> line 3") so that every later error can say
exactly which line of which file is wrong.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ssdbench.errors import SuiteError

READABLE_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".parquet")

Record = tuple[str, Any]  # (where, decoded row)


def is_readable(path: Path) -> bool:
    """Whether `path` has a suffix these readers understand."""
    return path.name.endswith(READABLE_SUFFIXES)


def read_records(path: Path) -> list[Record]:
    """All records in `path`, chosen by its suffix; raise SuiteError on anything unreadable."""
    if not is_readable(path):
        raise SuiteError(
            f"cannot read prompts from {path}: expected a {', '.join(READABLE_SUFFIXES)} file"
        )
    try:
        if path.name.endswith(".parquet"):
            return read_parquet(path)
        if path.name.endswith(".json"):
            return read_json_array(path)
        return list(read_jsonl(path))
    except OSError as err:
        raise SuiteError(f"cannot read prompt file {path}: {err.strerror or err}") from err


def read_jsonl(path: Path) -> Iterator[Record]:
    """One JSON value per non-blank line; bytes are decoded per line to report the line."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as lines:
        for line_num, raw in enumerate(lines, start=1):
            where = f"{path} line {line_num}"
            try:
                line = raw.decode("utf-8").lstrip("\ufeff")
            except UnicodeDecodeError as err:
                raise SuiteError(f"malformed JSONL: {where} is not UTF-8 ({err.reason})") from err
            if not line.strip():
                continue
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as err:
                message = f"malformed JSONL: {where}: {err.msg} (column {err.colno})"
                raise SuiteError(message) from err


def read_json_array(path: Path) -> list[Record]:
    """A JSON file holding a list of records (the original `alpaca_data.json` layout)."""
    try:
        rows = json.loads(path.read_text(encoding="utf-8-sig"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SuiteError(f"malformed JSON in {path}: {err}") from err
    if not isinstance(rows, list):
        raise SuiteError(f"malformed JSON in {path}: expected a list of prompts at the top level")
    return [(f"{path} item {num}", row) for num, row in enumerate(rows, start=1)]


def read_parquet(path: Path) -> list[Record]:
    """Rows of a Parquet file (Hugging Face dataset layout); pyarrow is imported only here."""
    import pyarrow
    import pyarrow.parquet

    try:
        rows = pyarrow.parquet.read_table(path).to_pylist()
    except pyarrow.ArrowException as err:
        raise SuiteError(f"cannot read Parquet file {path}: {err}") from err
    return [(f"{path} row {num}", row) for num, row in enumerate(rows, start=1)]
