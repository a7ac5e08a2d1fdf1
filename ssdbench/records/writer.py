"""Write a run directory: claim it first, write Parquet tables atomically, mark it complete last.

Lifecycle: `RunWriter.create()` (before any expensive work: it fails at once on a bad
`--out`) writes manifest.json with status "running"; `finish()` writes the three tables
and only then marks the manifest "complete"; `fail()` marks it "failed"/"interrupted".
A reader trusts a run only when the manifest says "complete".
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ssdbench.errors import RunDirectoryError
from ssdbench.records import schema, strict_json
from ssdbench.records.liveness import process_identity
from ssdbench.records.manifest import sha256_file, utc_now_iso

Columns = Mapping[str, Sequence]


def new_run_id() -> str:
    """`<UTC timestamp>-<6 hex chars>`, e.g. 20260301-120000-3fa9c1; sorts by start time."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(3)}"


def default_run_dir(base: str | os.PathLike = "runs", *, run_id: str | None = None) -> Path:
    """`<base>/<run_id>`, with a fresh run id unless one is given."""
    return Path(base) / (run_id or new_run_id())


def _blocking_ancestor(path: Path) -> Path | None:
    """The nearest existing ancestor of `path` that is not a directory, if any."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def enclosing_run(path: Path) -> Path | None:
    """The run directory `path` lies inside (an ancestor holding an ssdbench manifest), if any."""
    for parent in Path(os.path.abspath(path)).parents:
        try:
            manifest = json.loads((parent / schema.MANIFEST_NAME).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if isinstance(manifest, dict) and "schema_version" in manifest:
            return parent
    return None


def refuse_inside_run(out_dir: Path) -> None:
    """A run directory's contents are its records (hashed, compared): no new run may be written into them."""
    run = enclosing_run(out_dir)
    if run is not None:
        raise RunDirectoryError(f"refusing to write a run into {out_dir}: it is inside the run directory {run}; "
                                "choose an --out outside it")


def _claim_directory(out_dir: Path) -> None:
    """Make `out_dir` (or accept it empty); refuse anything that holds files or lies inside a run."""
    refuse_inside_run(out_dir)
    if out_dir.exists() or out_dir.is_symlink():
        if not out_dir.is_dir():
            raise RunDirectoryError(f"cannot use {out_dir} as a run directory: it exists "
                                    "and is not a directory")
        if any(out_dir.iterdir()):
            raise RunDirectoryError(f"refusing to write into {out_dir}: it already holds "
                                    "files (an earlier run?); choose a new --out")
        return
    try:
        out_dir.mkdir(parents=True)
    except FileExistsError:
        _claim_directory(out_dir)  # created concurrently: check it again
    except OSError as err:
        blocker = _blocking_ancestor(out_dir)
        why = f"{blocker} is a file, not a directory" if blocker else err.strerror or err
        raise RunDirectoryError(f"cannot create run directory {out_dir}: {why}") from None


def stop_reason(exc: BaseException) -> tuple[str, str]:
    """The manifest's (reason, status) for a run stopped by `exc`: a signal interrupts it, anything else fails it."""
    if isinstance(exc, KeyboardInterrupt):  # Ctrl-C, or SIGTERM/SIGHUP (cli.signals.Terminated names its signal)
        return f"interrupted ({str(exc) or 'SIGINT, Ctrl-C'})", schema.STATUS_INTERRUPTED
    return f"{type(exc).__name__}: {exc}", schema.STATUS_FAILED


def whole_rows(columns: Columns) -> dict[str, list]:
    """`columns` cut to the rows every column has: a signal may land between two columns' appends of one row."""
    rows = min((len(values) for values in columns.values()), default=0)
    return {name: list(values[:rows]) for name, values in columns.items()}


def _dump_json(data: Mapping) -> bytes:
    return (strict_json.dumps(data, indent=2, default=str) + "\n").encode()


# manifest.json is created this many bytes longer than its JSON (trailing spaces, still valid JSON), so
# that on a full disk the final status can still be written over it in place, in blocks it already has.
MANIFEST_RESERVE_BYTES = 4096


class RunWriter:
    """Owns one run directory. Use `RunWriter.create(...)`, then `finish()` or `fail()`.

    As a context manager, an exception (or leaving without `finish()`) marks the run
    failed, and Ctrl-C marks it interrupted; the exception still propagates.
    """

    def __init__(self, path: Path, manifest: dict) -> None:
        self.path = path
        self.manifest = manifest
        self._t0 = time.monotonic()

    @classmethod
    def create(cls, out_dir: str | os.PathLike, run_id: str, manifest: Mapping) -> RunWriter:
        """Claim `out_dir` and write manifest.json with status "running".

        Raises RunDirectoryError when `out_dir` exists and is not an empty directory, or
        cannot be created or written. Nothing already on disk is modified.
        """
        path = Path(out_dir)
        _claim_directory(path)
        data = {**manifest, "schema_version": schema.SCHEMA_VERSION, "run_id": run_id,
                "status": schema.STATUS_RUNNING, "started_at": utc_now_iso(), "process": process_identity()}
        tmp = path / f".{schema.MANIFEST_NAME}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(_dump_json(data) + b" " * MANIFEST_RESERVE_BYTES)
                f.flush()
                os.fsync(f.fileno())
            # link, not rename: whole or absent, and of two runs racing for one directory only one gets it
            os.link(tmp, path / schema.MANIFEST_NAME)
        except FileExistsError:
            raise RunDirectoryError(f"refusing to write into {path}: another run "
                                    "claimed it first") from None
        except OSError as err:
            raise RunDirectoryError(f"cannot write to run directory {path}: "
                                    f"{err.strerror or err}") from None
        finally:
            tmp.unlink(missing_ok=True)
        return cls(path, data)

    @property
    def status(self) -> str:
        return self.manifest["status"]

    def finish(self, steps_cols: Columns, requests_cols: Columns, gpu_rows: Sequence[Mapping],
               extra_manifest: Mapping | None = None, *, optional: Mapping[str, Columns] | None = None) -> None:
        """Write steps/requests/gpu Parquet, then mark the manifest complete.

        Columns are validated against the schema (SchemaError on a mismatch) before
        anything is written. RunDirectoryError if the files cannot be written.
        """
        if self.status != schema.STATUS_RUNNING:
            raise RuntimeError(f"finish() on a run whose status is already {self.status!r}")
        tables = {"steps": schema.table_from_columns("steps", steps_cols),
                  "requests": schema.table_from_columns("requests", requests_cols),
                  "gpu": schema.table_from_rows("gpu", gpu_rows)}
        tables.update({name: schema.table_from_columns(name, cols) for name, cols in (optional or {}).items()})
        try:
            files = self._write_tables(tables, suffix=".parquet")
        except OSError as err:
            reason = f"writing records failed: {err.strerror or err}"
            self.fail(reason)
            raise RunDirectoryError(f"cannot write records in {self.path}: "
                                    f"{err.strerror or err}") from None
        self._write_manifest({**(extra_manifest or {}), "files": files},
                             status=schema.STATUS_COMPLETE)

    def fail(self, reason: str, status: str = schema.STATUS_FAILED, *,
             steps_cols: Columns | None = None, requests_cols: Columns | None = None,
             gpu_rows: Sequence[Mapping] | None = None, extra_manifest: Mapping | None = None) -> bool:
        """Mark the run failed or interrupted, with `reason`; never raises on I/O errors.

        Tables given here (what was measured before the stop) are kept as `<table>.partial.parquet`,
        hashed under "partial_files", and the manifest's "partial" counts them: `load_run(...,
        allow_partial=True)` reads them back as a partial run. A run already complete is left alone.
        Returns whether the manifest was updated.
        """
        if status not in (schema.STATUS_FAILED, schema.STATUS_INTERRUPTED):
            raise ValueError(f"fail() status must be 'failed' or 'interrupted', not {status!r}")
        if self.status == schema.STATUS_COMPLETE:
            return False
        extra: dict = {**(extra_manifest or {}), "reason": reason}
        partial = self._write_partial(steps_cols, requests_cols, gpu_rows)
        if partial:
            extra["partial_files"] = partial
        if "steps.partial.parquet" in partial and "requests.partial.parquet" in partial:
            extra["partial"] = {"requests": partial["requests.partial.parquet"]["rows"],
                                "rounds": partial["steps.partial.parquet"]["rows"],
                                "meaning": "the requests finished and the rounds measured before the run stopped"}
        try:
            self._write_manifest(extra, status=status)
        except (OSError, RunDirectoryError):
            return False
        return True

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: object) -> None:
        if self.status != schema.STATUS_RUNNING:
            return
        if exc_type is None:
            self.fail("the run ended without writing its records")
        else:
            self.fail(*stop_reason(exc))

    def _write_partial(self, steps_cols: Columns | None, requests_cols: Columns | None,
                       gpu_rows: Sequence[Mapping] | None) -> dict:
        tables = {}
        try:
            if steps_cols is not None:
                tables["steps"] = schema.table_from_columns("steps", whole_rows(steps_cols))
            if requests_cols is not None:
                tables["requests"] = schema.table_from_columns("requests", whole_rows(requests_cols))
            if gpu_rows is not None:
                tables["gpu"] = schema.table_from_rows("gpu", gpu_rows)
            return self._write_tables(tables, suffix=".partial.parquet")
        except (OSError, ValueError) as err:
            return {"error": f"{type(err).__name__}: {err}"}

    def _write_tables(self, tables: Mapping[str, pa.Table], *, suffix: str) -> dict:
        """Write every table under a temporary name, then rename them all into place."""
        staged = {}
        try:
            for name, table in tables.items():
                tmp = self.path / f".{name}{suffix}.tmp"
                staged[name] = tmp  # before writing: a half-written file must go too (a full disk)
                pq.write_table(table, tmp)
            files = {}
            for name, tmp in staged.items():
                final = self.path / f"{name}{suffix}"
                os.replace(tmp, final)
                files[final.name] = {"rows": tables[name].num_rows,
                                     "bytes": final.stat().st_size,
                                     "sha256": sha256_file(final)}
            return files
        finally:
            for tmp in staged.values():
                tmp.unlink(missing_ok=True)

    def _write_manifest(self, extra: Mapping, *, status: str) -> None:
        """Rewrite manifest.json atomically (temp file, fsync, rename) with `status`."""
        data = {**self.manifest, **extra, "status": status, "ended_at": utc_now_iso(),
                "duration_s": round(time.monotonic() - self._t0, 3)}
        tmp = self.path / f".{schema.MANIFEST_NAME}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(_dump_json(data))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path / schema.MANIFEST_NAME)
        except OSError as err:
            tmp.unlink(missing_ok=True)
            if not self._overwrite_in_place(data):
                raise RunDirectoryError(f"cannot write {self.path / schema.MANIFEST_NAME}: "
                                        f"{err.strerror or err}") from None
        self.manifest = data

    def _overwrite_in_place(self, data: Mapping) -> bool:
        """Last resort on a full disk: write `data` over manifest.json within its reserved length.

        Only when it fits, so no new block is needed and the write cannot stop half-way for space.
        """
        final = self.path / schema.MANIFEST_NAME
        try:
            size = final.stat().st_size
            content = _dump_json(data)
            if len(content) > size:
                return False
            with open(final, "r+b") as f:
                f.write(content + b" " * (size - len(content)))
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            return False
        return True
