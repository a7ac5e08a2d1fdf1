"""Where the file-backed suites live inside a user's data folder (`--data-dir`).

Each suite has an ordered list of glob patterns under its own sub-folder. The first pattern
that matches anything wins, and all of its matches are read in name order, so sharded
Parquet splits (`test-00000-of-00002.parquet`, ...) load as one suite.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ssdbench.errors import SuiteError

DATA_DIR_HINT = "pass --data-dir or set SSDBENCH_DATA_DIR to a folder that holds"


@dataclass(frozen=True)
class LocalLayout:
    """A suite's sub-folder in the data dir and the file patterns tried there, in order."""

    folder: str
    patterns: tuple[str, ...]

    def candidates(self, data_dir: Path) -> list[Path]:
        """The patterns as paths under `data_dir`, for lookup and for error messages."""
        return [data_dir / self.folder / pattern for pattern in self.patterns]

    def describe(self) -> str:
        """The layout relative to a data dir, e.g. 'gsm8k/test.jsonl (also: gsm8k/*.jsonl)'."""
        first, *rest = [f"{self.folder}/{p}" for p in self.patterns]
        return f"{first} (also: {', '.join(rest)})" if rest else first


LAYOUTS = {
    "gsm8k": LocalLayout(
        "gsm8k", ("test.jsonl", "main/test-*.parquet", "test-*.parquet", "*.jsonl", "*.parquet")
    ),
    "specbench": LocalLayout("spec_bench", ("question.jsonl",)),
    "alpaca": LocalLayout(
        "alpaca", ("*.jsonl", "*.json", "*.parquet", "data/*.parquet", "data/*.jsonl")
    ),
    "ultrafeedback": LocalLayout(
        "ultrafeedback",
        ("*.jsonl", "*.parquet", "data/test_prefs-*.parquet", "data/*.parquet", "data/*.jsonl"),
    ),
}


def find_local_files(name: str, data_dir: Path | None) -> list[Path]:
    """The files that hold suite `name` under `data_dir`; SuiteError says where it looked."""
    layout = LAYOUTS[name]
    if data_dir is None:
        raise SuiteError(
            f"suite '{name}' is read from local files and no data dir was given; "
            f"{DATA_DIR_HINT} {layout.describe()}"
        )
    for pattern in layout.candidates(data_dir):
        matches = sorted(p for p in pattern.parent.glob(pattern.name) if p.is_file())
        if matches:
            return matches
    looked = ", ".join(str(p) for p in layout.candidates(data_dir))
    missing = "" if data_dir.is_dir() else f" (data dir {data_dir} does not exist)"
    raise SuiteError(
        f"suite '{name}' not found: looked for {looked}{missing}; put the files there, or "
        f"{DATA_DIR_HINT} {layout.folder}/"
    )
