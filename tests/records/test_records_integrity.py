"""What a run records can be trusted: hashes checked on read, strict JSON, no run inside a run, finite settings."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from cli_checks import assert_one_line_error
from typer.testing import CliRunner

from ssdbench.cli.main import app
from ssdbench.records.writer import RunWriter

runner = CliRunner()


def strict_loads(text: str):
    """json.loads that refuses NaN / Infinity, as strict parsers (JavaScript, Go, jq) do."""
    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def run(tiny: Path, out: Path, *extra: str):
    return runner.invoke(app, ["run", "--target", str(tiny), "--suite", "smoke", "--num-prompts", "2",
                               "--max-new-tokens", "4", "--no-chat-template", "--methods", "ar,sd", "--k", "2",
                               "--out", str(out), *extra])


@pytest.fixture(scope="module")
def two_runs(tiny, tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("runs")
    for name, seed in (("a", "0"), ("b", "1")):
        result = run(tiny, folder / name, "--seed", seed, "--temperature", "0.7")
        assert result.exit_code == 0, result.output
    return folder / "a", folder / "b"


@pytest.mark.parametrize("table", ["steps", "requests"])  # gpu.parquet is empty, byte-identical, here
def test_a_swapped_table_is_refused_by_compare_and_report(two_runs, tmp_path, table):
    a, b = (shutil.copytree(p, tmp_path / p.name) for p in two_runs)
    assert runner.invoke(app, ["compare", str(a), str(b)]).exit_code == 0
    shutil.copy(b / f"{table}.parquet", a / f"{table}.parquet")  # valid Parquet, another run's rows
    assert_one_line_error(runner.invoke(app, ["compare", str(a), str(b)]), f"{table}.parquet", "sha256",
                          "changed or replaced")
    assert_one_line_error(runner.invoke(app, ["report", str(a), "--out", str(tmp_path / "rep")]),
                          f"{table}.parquet", "sha256")
    assert_one_line_error(runner.invoke(app, ["project", str(a)]), f"{table}.parquet", "sha256")


def test_manifests_and_json_output_are_strict_json(tiny, two_runs, tmp_path):
    for path in two_runs:
        manifest = strict_loads((path / "manifest.json").read_text())
        assert manifest["status"] == "complete"
    result = run(tiny, tmp_path / "run", "--format", "json")
    assert result.exit_code == 0, result.output
    strict_loads(result.stdout.strip().splitlines()[-1])
    result = runner.invoke(app, ["compare", *map(str, two_runs), "--format", "json"])
    strict_loads(result.stdout)


def test_a_non_finite_measurement_is_written_as_null(tmp_path):
    """Settings are refused when non-finite; a measurement that comes out so must still leave strict JSON."""
    writer = RunWriter.create(tmp_path / "run", "r1", {"measured": {"bandwidth_gbs": math.inf, "rate": [math.nan]}})
    writer.fail("test")
    manifest = strict_loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["measured"] == {"bandwidth_gbs": None, "rate": [None]} and manifest["status"] == "failed"


@pytest.mark.parametrize("flag, value", [
    ("--temperature", "inf"), ("--temperature", "nan"), ("--temperature", "-inf"),
    ("--draft-temperature", "nan"), ("--draft-temperature", "inf"),
    ("--top-p", "nan"), ("--top-p", "inf"),
    ("--saguaro-c", "nan"), ("--round-timeout-s", "inf"), ("--round-timeout-s", "nan"), ("--round-timeout-s", "0"),
])
def test_non_finite_settings_are_refused_before_anything_is_written(tiny, tmp_path, flag, value):
    assert_one_line_error(run(tiny, tmp_path / "run", flag, value), flag)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("values", ["0,inf", "nan", "-inf"])
def test_sweep_refuses_non_finite_temperatures(tiny, tmp_path, values):
    result = runner.invoke(app, ["sweep", "--target", str(tiny), "--suite", "smoke", "--num-prompts", "1",
                                 "--temperatures", values, "--out", str(tmp_path / "sw")])
    assert_one_line_error(result, "--temperature", "finite")
    assert not (tmp_path / "sw").exists()


def test_project_refuses_non_finite_numbers(two_runs):
    for flag, value in (("--context", "inf"), ("--context", "nan"), ("--efficiency", "nan"), ("--hit-rate", "inf")):
        assert_one_line_error(runner.invoke(app, ["project", str(two_runs[0]), flag, value]), flag)


def test_out_inside_an_existing_run_is_refused(tiny, two_runs, tmp_path):
    a = shutil.copytree(two_runs[0], tmp_path / "a")
    before = {p.relative_to(a): p.read_bytes() for p in a.rglob("*") if p.is_file()}
    for inside in (a / "nested", a / "deeper" / "still"):
        assert_one_line_error(run(tiny, inside), "inside the run directory", str(a))
        result = runner.invoke(app, ["sweep", "--target", str(tiny), "--suite", "smoke", "--out", str(inside)])
        assert_one_line_error(result, "inside the run directory")
    assert {p.relative_to(a): p.read_bytes() for p in a.rglob("*") if p.is_file()} == before
    assert runner.invoke(app, ["compare", str(a)]).exit_code == 0  # and it still reads back whole
