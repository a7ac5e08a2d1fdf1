"""Run records: schema validation, the run-directory lifecycle, and reading runs back."""

from __future__ import annotations

import hashlib
import json
import math

import pandas as pd
import pyarrow.parquet as pq
import pytest

from ssdbench.errors import RunDirectoryError
from ssdbench.records import reader, schema
from ssdbench.profiling.environment import capture_environment
from ssdbench.records.manifest import sha256_file
from ssdbench.records.reader import load_run, read_manifest
from ssdbench.records.schema import SchemaError, table_from_columns
from ssdbench.records.writer import RunWriter, default_run_dir, new_run_id

RUN_ID = "test-run"


def steps_cols() -> dict:
    """Two sd rounds and one ssd round (a cache hit) of one request."""
    n = 3
    return {
        "run_id": [RUN_ID] * n, "method": ["sd", "sd", "ssd"], "engine": ["native"] * n,
        "suite": ["tiny"] * n, "prompt_id": ["p0"] * n, "request_idx": [0, 0, 1],
        "repeat": [0] * n, "round": [0, 1, 0], "batch_size": [1] * n, "row": [0] * n,
        "proposed": [4, 4, 4], "accepted": [4, 1, 2], "emitted": [5, 2, 3],
        "bonus_token": [11, 12, 13], "cache_hit": [None, None, True],
        "backup": [None, None, None], "fan_out_total": [None, None, 15], "acceptance": ["exact"] * n,
        "counted_by": ["ssdbench"] * n,
        "t_start_ns": [1_000, 2_000, 3_000], "draft_ms": [1.5, 1.25, 0.0],
        "verify_ms": [3.0, 3.5, 3.25], "wait_ms": [0.0, 0.0, 0.5],
        "sample_ms": [0.25, 0.25, 0.25], "step_ms": [4.75, 5.0, 4.0],
    }


def requests_cols() -> dict:
    """A normal request and a one-token one (its per-token rates are undefined)."""
    return {
        "run_id": [RUN_ID] * 2, "method": ["sd", "ssd"], "engine": ["native"] * 2,
        "suite": ["tiny"] * 2, "prompt_id": ["p0", "p0"], "request_idx": [0, 1],
        "repeat": [0, 0], "batch_size": [1, 1], "seed": [7, 7], "temperature": [0.0, 0.7],
        "prompt_tokens": [3, 3], "new_tokens": [7, 1], "ttft_ms": [9.0, 8.5],
        "decode_ms": [9.75, None], "tpot_ms": [9.75 / 6, None],
        "decode_tokens_per_s": [6 / 9.75e-3, None], "rounds": [2, 0],
        "finish_reason": ["length", "eos"], "prompt_token_ids": [[1, 2, 3], [1, 2, 3]],
        "output_token_ids": [[4, 5, 6, 7, 8, 9, 10], [2]],
    }


def gpu_rows() -> list[dict]:
    return [{"t_ns": 1_000 + i, "device_index": i % 2, "role": ["target", "draft"][i % 2],
             "util_pct": 50.0 + i, "mem_mib": 1024.0, "power_w": 300.5,
             "energy_mj": None if i % 2 else 1e6 + i, "sm_clock_mhz": 1980.0}
            for i in range(4)]


def write_run(path, **extra) -> RunWriter:
    writer = RunWriter.create(path, RUN_ID, {"settings": {"k": 4}})
    writer.finish(steps_cols(), requests_cols(), gpu_rows(), extra or None)
    return writer


def snapshot(path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def assert_column_equal(frame: pd.DataFrame, name: str, expected: list) -> None:
    for got, want in zip(frame[name].tolist(), expected, strict=True):
        if want is None:
            assert got is None or pd.isna(got), (name, got)
        elif isinstance(want, list):
            assert list(got) == want, name
        elif isinstance(want, float):
            assert math.isclose(got, want), name
        else:
            assert got == want, name


# --- schema -----------------------------------------------------------------------------

def test_every_column_has_a_description_and_unique_name():
    for table, cols in schema.COLUMNS.items():
        names = [c.name for c in cols]
        assert len(set(names)) == len(names), table
        assert all(schema.DESCRIPTIONS[table][n].strip() for n in names)


def test_unknown_column_is_refused_with_a_suggestion():
    cols = steps_cols()
    cols["acepted"] = cols.pop("accepted")
    with pytest.raises(SchemaError, match=r"'acepted' \(did you mean 'accepted'\?\)"):
        table_from_columns("steps", cols)


def test_missing_column_null_in_required_column_and_ragged_columns_are_refused():
    cols = steps_cols()
    del cols["wait_ms"]
    with pytest.raises(SchemaError, match="missing column.*wait_ms"):
        table_from_columns("steps", cols)
    cols = steps_cols()
    cols["accepted"] = [1, None, 2]
    with pytest.raises(SchemaError, match="steps.accepted is not nullable"):
        table_from_columns("steps", cols)
    cols = steps_cols()
    cols["round"] = [0, 1]
    with pytest.raises(SchemaError, match="differ in length"):
        table_from_columns("steps", cols)
    with pytest.raises(SchemaError, match="unknown table"):
        table_from_columns("step", steps_cols())
    assert table_from_columns("steps", {}).num_rows == 0  # nothing recorded


# --- writing and reading back -----------------------------------------------------------

@pytest.mark.parametrize("table, expected", [
    ("steps", steps_cols()), ("requests", requests_cols()),
    ("gpu", {k: [r[k] for r in gpu_rows()] for k in gpu_rows()[0]}),
])
def test_round_trip(tmp_path, table, expected):
    (tmp_path / "run").mkdir()  # an existing empty directory is fine
    write_run(tmp_path / "run")
    frame = getattr(load_run(tmp_path / "run"), table)
    assert list(frame.columns) == [c.name for c in schema.COLUMNS[table]]
    for name, values in expected.items():
        assert_column_equal(frame, name, values)


def test_nullable_ints_and_bools_keep_their_kind(tmp_path):
    steps = load_run(write_run(tmp_path / "run").path).steps
    assert isinstance(steps["fan_out_total"].dtype, pd.Int32Dtype)
    assert isinstance(steps["cache_hit"].dtype, pd.BooleanDtype)
    assert steps["accepted"].dtype == "int32"


def test_empty_gpu_table_round_trips(tmp_path):
    writer = RunWriter.create(tmp_path / "run", RUN_ID, {})
    writer.finish(steps_cols(), requests_cols(), [], {"gpu_telemetry": "no GPU"})
    run = load_run(writer.path)
    assert run.gpu.empty and list(run.gpu.columns) == [c.name for c in schema.COLUMNS["gpu"]]
    assert run.manifest["gpu_telemetry"] == "no GPU"


def test_complete_manifest_and_parquet_metadata(tmp_path):
    writer = write_run(tmp_path / "run", note="x")
    manifest = read_manifest(writer.path)
    assert manifest["status"] == "complete" and manifest["run_id"] == RUN_ID
    assert manifest["settings"] == {"k": 4} and manifest["note"] == "x"
    assert manifest["started_at"] <= manifest["ended_at"]
    for name in schema.TABLE_NAMES:
        file = writer.path / f"{name}.parquet"
        meta = pq.read_schema(file).metadata
        assert meta[schema.VERSION_KEY] == str(schema.SCHEMA_VERSION).encode()
        assert manifest["files"][file.name]["sha256"] == sha256_file(file)
    assert not [p for p in writer.path.iterdir() if p.name.endswith(".tmp")]


def test_existing_non_empty_out_is_refused_and_left_untouched(tmp_path):
    earlier = write_run(tmp_path / "run").path
    before = snapshot(earlier)
    with pytest.raises(RunDirectoryError, match="refusing to write into .*choose a new --out"):
        RunWriter.create(earlier, "second", {})
    assert snapshot(earlier) == before


def test_out_under_a_regular_file_is_refused(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(RunDirectoryError, match=f"{blocker} is a file") as info:
        RunWriter.create(blocker / "runs" / "run", RUN_ID, {})
    assert "\n" not in str(info.value)
    with pytest.raises(RunDirectoryError, match="not a directory"):
        RunWriter.create(blocker, RUN_ID, {})


def test_failed_run_is_refused_with_reason_and_keeps_partial_tables(tmp_path):
    writer = RunWriter.create(tmp_path / "run", RUN_ID, {})
    assert writer.fail("model exploded\nbadly", steps_cols=steps_cols())
    assert (writer.path / "steps.partial.parquet").is_file()
    assert not (writer.path / "steps.parquet").exists()
    with pytest.raises(RunDirectoryError, match=r"status 'failed' \(model exploded badly\)"):
        load_run(writer.path)


def test_interrupt_inside_context_marks_run_interrupted(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with RunWriter.create(tmp_path / "run", RUN_ID, {}):
            raise KeyboardInterrupt
    with pytest.raises(RunDirectoryError, match="status 'interrupted'"):
        load_run(tmp_path / "run")


def test_completed_run_is_not_downgraded_by_a_later_failure(tmp_path):
    with pytest.raises(RuntimeError):
        with write_run(tmp_path / "run") as writer:
            raise RuntimeError("rendering the report failed")
    assert not writer.fail("too late")
    assert load_run(tmp_path / "run").manifest["status"] == "complete"


def test_unfinished_run_is_refused_as_running(tmp_path):
    RunWriter.create(tmp_path / "run", RUN_ID, {})
    with pytest.raises(RunDirectoryError, match="status 'running'"):
        load_run(tmp_path / "run")


def test_bad_columns_write_nothing(tmp_path):
    writer = RunWriter.create(tmp_path / "run", RUN_ID, {})
    bad = {**requests_cols(), "extra": [1, 2]}
    with pytest.raises(SchemaError, match="extra"):
        writer.finish(steps_cols(), bad, [])
    assert sorted(p.name for p in writer.path.iterdir()) == ["manifest.json"]


@pytest.mark.parametrize("damage, message", [
    (lambda f: f.write_bytes(b"not parquet at all"), "requests.parquet is corrupt"),
    (lambda f: f.write_bytes(f.read_bytes()[:100]), "requests.parquet is corrupt"),
    (lambda f: f.unlink(), "requests.parquet is missing"),
])
def test_damaged_parquet_is_named(tmp_path, damage, message):
    path = write_run(tmp_path / "run").path
    damage(path / "requests.parquet")
    with pytest.raises(RunDirectoryError, match=message):
        load_run(path)


def test_newer_schema_version_is_refused(tmp_path):
    file = write_run(tmp_path / "run").path / schema.MANIFEST_NAME
    file.write_text(json.dumps({**json.loads(file.read_text()),
                                "schema_version": schema.SCHEMA_VERSION + 1}))
    with pytest.raises(RunDirectoryError, match="newer than this ssdbench knows"):
        load_run(file.parent)


def test_older_schema_version_goes_through_the_upgraders(tmp_path, monkeypatch):
    path = write_run(tmp_path / "run").path
    newer = schema.SCHEMA_VERSION + 1
    monkeypatch.setattr(schema, "SCHEMA_VERSION", newer)
    with pytest.raises(RunDirectoryError, match="can no longer read"):
        load_run(path)
    calls = []

    def upgrade(manifest, tables):
        calls.append(manifest["schema_version"])
        return {**manifest, "upgraded": True}, tables

    monkeypatch.setitem(reader.UPGRADERS, newer - 1, upgrade)
    run = load_run(path)
    assert calls == [newer - 1]
    assert run.manifest["upgraded"] and run.manifest["schema_version"] == newer


def _rewrite_as_v1(path) -> None:
    """What a v1 run looked like on disk: no requests.batch_size (nor v3's steps.acceptance, v4's steps.counted_by), version 1 everywhere."""
    import pyarrow.parquet as pq

    for name in schema.TABLE_NAMES:
        table = pq.read_table(path / f"{name}.parquet")
        if name == "requests":
            table = table.drop_columns(["batch_size"])
        if name == "steps":
            table = table.drop_columns(["acceptance", "counted_by"])
        meta = {**table.schema.metadata, schema.VERSION_KEY: b"1"}
        pq.write_table(table.replace_schema_metadata(meta), path / f"{name}.parquet")
    manifest = path / schema.MANIFEST_NAME
    data = json.loads(manifest.read_text())
    for name, entry in data["files"].items():  # the hashes a v1 run recorded for its own files
        entry.update(sha256=sha256_file(path / name), bytes=(path / name).stat().st_size)
    manifest.write_text(json.dumps({**data, "schema_version": 1}))


def test_v1_requests_gain_the_batch_size_they_ran_in(tmp_path):
    """v1 ran baselines one at a time and the rest in batches (as their rounds record)."""
    steps = {**steps_cols(), "batch_size": [2, 2, 3]}
    requests = {name: values + values[:1] for name, values in requests_cols().items()}
    requests.update(method=["sd", "ssd", "hf-generate"], engine=["native", "native", "transformers"],
                    request_idx=[0, 1, 2])
    writer = RunWriter.create(tmp_path / "run", RUN_ID, {"config": {"batch_size": 2}})
    writer.finish(steps, requests, [])
    _rewrite_as_v1(writer.path)
    run = load_run(writer.path)
    assert run.manifest["schema_version"] == schema.SCHEMA_VERSION
    assert run.requests["batch_size"].tolist() == [2, 3, 1]
    assert run.steps["acceptance"].tolist() == ["exact"] * 3  # every run before v3 used the exact rule
    assert run.steps["counted_by"].tolist() == ["ssdbench"] * 3  # and before v4 ran every round itself
    assert run.manifest["acceptance"] == "exact"


@pytest.mark.parametrize("setup, message", [
    (lambda p: None, "does not exist"),
    (lambda p: p.write_text("x"), "not a directory"),
    (lambda p: p.mkdir(), "not an ssdbench run"),
    (lambda p: (p.mkdir(), (p / "manifest.json").write_text("{")), "unreadable"),
])
def test_not_a_run(tmp_path, setup, message):
    setup(tmp_path / "run")
    with pytest.raises(RunDirectoryError, match=message):
        load_run(tmp_path / "run")


def test_run_ids_are_unique_and_sortable(tmp_path):
    ids = {new_run_id() for _ in range(50)}
    assert len(ids) == 50
    path = default_run_dir(tmp_path)
    assert path.parent == tmp_path and path.name[:8].isdigit()
    assert default_run_dir("runs", run_id="abc").as_posix() == "runs/abc"


# --- environment ------------------------------------------------------------------------

def test_capture_environment_is_json_and_complete():
    import pyarrow

    import ssdbench

    env = json.loads(json.dumps(capture_environment()))
    assert env["tool"]["version"] == ssdbench.__version__
    assert env["packages"]["pyarrow"] == pyarrow.__version__
    assert env["cpu"]["logical_cores"] >= 1 and env["cpu"]["model"]
    assert env["memory"]["total_mib"] > 0
    gpus = env["gpus"]
    assert gpus["devices"] if gpus["available"] else gpus["reason"]


def test_file_hashes_match_hashlib(tmp_path):
    data = bytes(range(256)) * 1000
    (tmp_path / "w.bin").write_bytes(data)
    (tmp_path / "e.bin").write_bytes(b"")
    assert sha256_file(tmp_path / "w.bin", chunk=1000) == hashlib.sha256(data).hexdigest()
    assert sha256_file(tmp_path / "e.bin") == hashlib.sha256(b"").hexdigest()
