"""The self-skip draft through the real CLI: chosen by calibration, exact for sd and ssd, refused where it cannot run."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from cli_checks import assert_one_line_error
from cli_fixtures import save_tiny_model
from typer.testing import CliRunner

from ssdbench.cli.main import app

runner = CliRunner()


@pytest.fixture(scope="module")
def four_layers(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("models") / "tiny4", vocab=64, seed=3, num_layers=4)


def run(target: Path, out: Path, *extra: str):
    return runner.invoke(app, ["run", "--target", str(target), "--suite", "smoke", "--num-prompts", "3",
                               "--max-new-tokens", "12", "--no-chat-template", "--out", str(out), *extra])


def outputs(out: Path) -> dict[str, list[list[int]]]:
    requests = pq.read_table(out / "requests.parquet").to_pandas().sort_values("request_idx")
    return {m: [list(o) for o in g["output_token_ids"]] for m, g in requests.groupby("method")}


def test_auto_calibrates_once_and_sd_and_ssd_stay_greedy_identical_to_ar(four_layers, tmp_path):
    out = tmp_path / "run"
    result = run(four_layers, out, "--methods", "ar,sd,ssd", "--draft", "self-skip:auto", "--k", "3")
    assert result.exit_code == 0, result.output
    by_method = outputs(out)
    assert by_method["sd"] == by_method["ar"] and by_method["ssd"] == by_method["ar"]
    skip = json.loads((out / "manifest.json").read_text())["models"]["draft"]["self_skip"]
    assert skip["layers"] and set(skip["layers"]) <= {1, 2}  # never the first or the last layer
    assert any(c["layers"] == skip["layers"] for c in skip["candidates"])
    assert "self-skip draft: layers" in result.output
    steps = pq.read_table(out / "steps.parquet").to_pandas()
    assert (steps[steps["method"] == "sd"]["proposed"] == 3).any()


def test_given_layers_are_used_as_given(four_layers, tmp_path):
    out = tmp_path / "run"
    result = run(four_layers, out, "--methods", "ar,sd", "--draft", "self-skip:2", "--k", "2")
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["models"]["draft"]["self_skip"] == {"layers": [2], "chosen_by": "--draft"}
    assert manifest["kernels"]["draft"]["skipped_layers"] == [2]
    by_method = outputs(out)
    assert by_method["sd"] == by_method["ar"]


@pytest.mark.parametrize("extra,fragments", [
    (("--draft", "self-skip:1,x"), ("bad layer list",)),
    (("--draft", "self-skip:9"), ("9",)),
    (("--draft", "self-skip", "--engine", "hf"), ("self-skip", "native engine only")),
    (("--draft", "self-skip", "--methods", "ar,hf-assisted"), ("hf-assisted", "native engine only")),
])
def test_what_self_skip_cannot_do_is_one_line(four_layers, tmp_path, extra, fragments):
    assert_one_line_error(run(four_layers, tmp_path / "run", *extra), *fragments)
    assert not (tmp_path / "run").exists()  # refused before the run directory was claimed
