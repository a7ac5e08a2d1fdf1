"""Read a run directory back: refuse anything incomplete, unknown or damaged, in one line.

Older schema versions are upgraded in memory, one version at a time, by the functions in
`UPGRADERS` (from-version -> function returning the next version's manifest and tables).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ssdbench.errors import RunDirectoryError
from ssdbench.records import schema
from ssdbench.records.integrity import verify_recorded_file
from ssdbench.records.liveness import describe_running

Tables = dict[str, pa.Table]
Upgrader = Callable[[dict, Tables], tuple[dict, Tables]]

HF_BASELINES = ("hf-generate", "hf-assisted")


def _v1_to_v2(manifest: dict, tables: Tables) -> tuple[dict, Tables]:
    """v2 adds requests.batch_size. v1 ran the transformers baselines one request at a time
    and everything else in batches of the configured size (the last one possibly shorter:
    its rounds' steps.batch_size says so)."""
    requests, steps = tables["requests"], tables["steps"]
    configured = int(manifest.get("config", {}).get("batch_size") or 1)
    keys = ("method", "engine", "request_idx", "repeat")
    per_request = {}
    if steps.num_rows:
        for row in steps.select([*keys, "batch_size"]).to_pylist():
            per_request[tuple(row[k] for k in keys)] = row["batch_size"]
    sizes = [1 if row["method"] in HF_BASELINES else per_request.get(tuple(row[k] for k in keys), configured)
             for row in requests.select(list(keys)).to_pylist()]
    requests = requests.append_column("batch_size", pa.array(sizes, type=pa.int32()))
    return manifest, {**tables, "requests": requests}


def _v2_to_v3(manifest: dict, tables: Tables) -> tuple[dict, Tables]:
    """v3 adds steps.acceptance; every earlier run used the exact rule."""
    steps = tables["steps"]
    steps = steps.append_column("acceptance", pa.array(["exact"] * steps.num_rows, type=pa.string()))
    return {**manifest, "acceptance": manifest.get("acceptance", "exact")}, {**tables, "steps": steps}


def _v3_to_v4(manifest: dict, tables: Tables) -> tuple[dict, Tables]:
    """v4 adds steps.counted_by (and lets a server's rounds leave times, batch, row and bonus null); every
    earlier round was ssdbench's own."""
    steps = tables["steps"]
    steps = steps.append_column("counted_by", pa.array([schema.COUNTED_BY_SSDBENCH] * steps.num_rows, type=pa.string()))
    return manifest, {**tables, "steps": steps}


def _v4_to_v5(manifest: dict, tables: Tables) -> tuple[dict, Tables]:
    """v5 adds endpoints.acceptance_invalid and endpoints.model_asked: a v4 run checked no figures (none was
    found invalid) and did not record the model asked for."""
    if "endpoints" not in tables:
        return manifest, tables
    table = tables["endpoints"]
    for name in ("acceptance_invalid", "model_asked"):
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(table.num_rows, type=pa.string()))
    return manifest, {**tables, "endpoints": table}


def _v5_to_v6(manifest: dict, tables: Tables) -> tuple[dict, Tables]:
    """v6 adds endpoints.cached_prompt_tokens, target_passes and text_matches_ar: a v5 run recorded none of them,
    so they are null (unknown), never a made-up 0."""
    if "endpoints" not in tables:
        return manifest, tables
    table = tables["endpoints"]
    for name, type_ in (("cached_prompt_tokens", pa.int32()), ("target_passes", pa.int64()),
                        ("text_matches_ar", pa.bool_())):
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(table.num_rows, type=type_))
    return manifest, {**tables, "endpoints": table}


# UPGRADERS[n] turns a version-n run into a version-(n+1) run.
UPGRADERS: dict[int, Upgrader] = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4, 4: _v4_to_v5, 5: _v5_to_v6}

_NULLABLE_DTYPES = {pa.int32(): pd.Int32Dtype(), pa.int64(): pd.Int64Dtype(),
                    pa.bool_(): pd.BooleanDtype()}


@dataclass
class Run:
    """A complete run. Nullable integer/bool columns use pandas' nullable dtypes (<NA>)."""

    path: Path
    manifest: dict
    steps: pd.DataFrame
    requests: pd.DataFrame
    gpu: pd.DataFrame
    events: pd.DataFrame | None = None  # optional table: None when the run has none
    partial: str | None = None  # a run that stopped early, read from its partial tables: what stopped it, what it kept
    endpoints: pd.DataFrame | None = None  # optional table: requests sent to serving engines (--endpoint)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def read_manifest(path: str | os.PathLike) -> dict:
    """The manifest of run directory `path`, whatever its status."""
    path = Path(path)
    if not path.exists():
        raise RunDirectoryError(f"no run at {path}: it does not exist")
    if not path.is_dir():
        raise RunDirectoryError(f"{path} is not a run directory: it is not a directory")
    manifest_path = path / schema.MANIFEST_NAME
    if not manifest_path.is_file():
        raise RunDirectoryError(f"{path} is not an ssdbench run: it has no "
                                f"{schema.MANIFEST_NAME}")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RunDirectoryError(f"{manifest_path} is unreadable: {_one_line(err)}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("schema_version"), int):
        raise RunDirectoryError(f"{manifest_path} is not an ssdbench manifest: no "
                                "schema_version")
    return manifest


def _check_version(path: Path, version: int) -> None:
    if version > schema.SCHEMA_VERSION:
        raise RunDirectoryError(
            f"{path} uses records schema v{version}, newer than this ssdbench knows "
            f"(v{schema.SCHEMA_VERSION}); upgrade ssdbench to read it")
    if version < 1:
        raise RunDirectoryError(f"{path} has an invalid records schema version {version}")


def _check_status(path: Path, manifest: dict) -> None:
    status = manifest.get("status")
    if status == schema.STATUS_COMPLETE:
        return
    if status == schema.STATUS_RUNNING:  # or killed before it could say otherwise (SIGKILL, OOM)
        raise RunDirectoryError(f"{path} is not a complete run: {describe_running(manifest)}")
    reason = manifest.get("reason") or "no reason recorded"
    kept = (f"; it kept {manifest['partial']['requests']} finished request(s) as partial tables, which `report` and "
            "`compare` read, labelled partial") if is_partial(manifest) else ""
    raise RunDirectoryError(f"{path} is not a complete run: status {status!r} "
                            f"({_one_line(reason)}){kept}")


def is_partial(manifest: dict) -> bool:
    """A run that stopped early (failed or interrupted) and kept what it had measured as partial tables."""
    return manifest.get("status") in (schema.STATUS_FAILED, schema.STATUS_INTERRUPTED) \
        and isinstance(manifest.get("partial"), dict) and isinstance(manifest.get("partial_files"), dict)


def describe_partial(manifest: dict) -> str:
    """`interrupted (SIGINT, Ctrl-C): 2 of 6 request(s), 40 round(s) measured before it stopped`."""
    kept, total = manifest["partial"], manifest.get("num_units")
    of_total = f" of {total}" if isinstance(total, int) else ""
    status, reason = manifest["status"], _one_line(manifest.get("reason") or "no reason recorded")
    return (f"{reason if reason.startswith(status) else f'{status}: {reason}'}; "
            f"{kept.get('requests')}{of_total} request(s) finished and {kept.get('rounds')} round(s) measured "
            "before it stopped")


def _read_table(path: Path, name: str, manifest: dict, *, suffix: str = ".parquet") -> pa.Table:
    file, version = path / f"{name}{suffix}", manifest["schema_version"]
    if not file.is_file():
        raise RunDirectoryError(f"{file} is missing: the run directory is incomplete")
    try:
        table = pq.read_table(file)
    except (pa.ArrowException, OSError, ValueError) as err:
        raise RunDirectoryError(f"{file} is corrupt or unreadable: {_one_line(err)}") from None
    meta = table.schema.metadata or {}
    file_version = meta.get(schema.VERSION_KEY, b"").decode() or None
    if file_version != str(version):
        raise RunDirectoryError(f"{file} has records schema version {file_version}, but "
                                f"the manifest says {version}")
    verify_recorded_file(file, manifest)
    return table


def _upgrade(path: Path, manifest: dict, tables: Tables, version: int) -> tuple[dict, Tables]:
    while version < schema.SCHEMA_VERSION:
        upgrader = UPGRADERS.get(version)
        if upgrader is None:
            raise RunDirectoryError(f"{path} uses records schema v{version}, which this "
                                    "ssdbench can no longer read")
        manifest, tables = upgrader(manifest, tables)
        version += 1
        manifest = {**manifest, "schema_version": version}
    return manifest, tables


def _conform(path: Path, name: str, table: pa.Table) -> pa.Table:
    """Select and cast the current schema's columns; refuse a table that lacks some."""
    target = schema.schema_for(name)
    missing = [n for n in target.names if n not in table.column_names]
    if missing:
        raise RunDirectoryError(f"{path / f'{name}.parquet'} lacks column(s): "
                                f"{', '.join(missing)}")
    try:
        return table.select(target.names).cast(target)
    except (pa.ArrowException, ValueError) as err:
        raise RunDirectoryError(f"{path / f'{name}.parquet'} has unexpected column types: "
                                f"{_one_line(err)}") from None


def _to_pandas(name: str, table: pa.Table) -> pd.DataFrame:
    frame = table.to_pandas()
    for col in schema.COLUMNS[name]:
        if col.nullable and col.type in _NULLABLE_DTYPES:
            frame[col.name] = table.column(col.name).to_pandas(
                types_mapper=_NULLABLE_DTYPES.get)
    return frame


def load_run(path: str | os.PathLike, *, allow_partial: bool = False) -> Run:
    """Load a complete run directory; RunDirectoryError (one line) for anything else.

    allow_partial: a run that stopped early is read from the partial tables it kept, and says so
    in `Run.partial` (callers label it; it is never to pass for a complete run)."""
    path = Path(path)
    manifest = read_manifest(path)
    version = manifest["schema_version"]
    _check_version(path, version)
    partial = allow_partial and is_partial(manifest)
    if not partial:
        _check_status(path, manifest)
    # the hashes as written when the tables were (upgraders may rewrite the manifest)
    recorded = {**manifest, "files": manifest["partial_files"]} if partial else manifest
    suffix = ".partial.parquet" if partial else ".parquet"
    tables = {name: _read_table(path, name, recorded, suffix=suffix) for name in schema.TABLE_NAMES}
    tables.update({name: _read_table(path, name, recorded, suffix=suffix) for name in schema.OPTIONAL_TABLE_NAMES
                   if (path / f"{name}{suffix}").is_file()})  # upgraded with the rest
    description = describe_partial(manifest) if partial else None
    manifest, tables = _upgrade(path, manifest, tables, version)
    frames = {name: _to_pandas(name, _conform(path, name, table)) for name, table in tables.items()}
    return Run(path=path, manifest=manifest, partial=description, **frames)
