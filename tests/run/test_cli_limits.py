"""Context, memory and K limits, and requests that end at their first token, through the real CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from cli_checks import assert_one_line_error
from cli_fixtures import save_tiny_model
from typer.testing import CliRunner

from ssdbench.cli.main import app

runner = CliRunner()


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("models")
    return {"tiny": save_tiny_model(folder / "tiny"),
            "short": save_tiny_model(folder / "short", max_positions=256),
            "endless": save_tiny_model(folder / "endless", max_positions=2**31),
            "eos-first": save_tiny_model(folder / "eos-first", is_eos_first=True)}


def run_args(target: Path, out: Path, *extra: str) -> list[str]:
    return ["run", "--target", str(target), "--suite", "smoke", "--num-prompts", "3", "--no-chat-template",
            "--out", str(out), *extra]


def test_new_tokens_beyond_the_context_are_refused_at_once(models, tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, run_args(models["tiny"], out, "--max-new-tokens", "100000000"))
    line = assert_one_line_error(result, "100000000", "context of 512", "the largest --max-new-tokens that fits is")
    assert int(re.search(r"--max-new-tokens that fits is (\d+)", line).group(1)) == 512 - 4 - 1
    assert not out.exists()
    near = runner.invoke(app, run_args(models["tiny"], out, "--max-new-tokens", "500"))  # past the longest prompt
    line = assert_one_line_error(near, "(25 tokens)", "context of 512", "the largest --max-new-tokens that fits is")
    largest = int(re.search(r"--max-new-tokens that fits is (\d+)", line).group(1))
    fits = runner.invoke(app, run_args(models["tiny"], out, "--max-new-tokens", str(largest), "--ignore-eos"))
    assert fits.exit_code == 0, fits.output  # the suggestion is exact: it runs, to the last position
    beyond = runner.invoke(app, run_args(models["tiny"], tmp_path / "beyond", "--max-new-tokens", str(largest + 1)))
    assert_one_line_error(beyond, "context of 512")


def test_400_new_tokens_on_a_256_position_model(models, tmp_path):
    result = runner.invoke(app, run_args(models["short"], tmp_path / "run", "--max-new-tokens", "400"))
    assert_one_line_error(result, "--max-new-tokens 400", "context of 256")
    assert not (tmp_path / "run").exists()


def test_ssd_tree_positions_count_against_the_context(models, tmp_path):
    """ssd's tree reaches K past the verify's K: 2K positions of slack."""
    args = ("--methods", "ar,ssd", "--k", "4", "--max-new-tokens", "226")  # 25 + 226 + 4 would fit
    result = runner.invoke(app, run_args(models["short"], tmp_path / "run", *args))
    assert_one_line_error(result, "8 draft positions (K=4)", "context of 256")


def test_long_prompts_refused_or_truncated_left(models, tmp_path):
    full = tmp_path / "full"
    assert runner.invoke(app, run_args(models["short"], full, "--max-new-tokens", "2", "--methods", "ar")).exit_code == 0
    originals = pq.read_table(full / "requests.parquet").to_pandas().set_index("prompt_id")["prompt_token_ids"]
    args = ("--max-new-tokens", "240", "--methods", "ar,sd", "--ignore-eos")
    refused = runner.invoke(app, run_args(models["short"], tmp_path / "refused", *args))
    assert_one_line_error(refused, "beyond the model's context of 256", "--truncate-prompts left")
    assert not (tmp_path / "refused").exists()

    out = tmp_path / "cut"
    result = runner.invoke(app, run_args(models["short"], out, *args, "--truncate-prompts", "left"))
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    room = 256 - 240 - 4
    truncation = manifest["suite"]["truncation"]
    assert truncation["side"] == "left" and truncation["max_prompt_tokens"] == room
    assert manifest["config"]["truncate_prompts"] == "left"
    requests = pq.read_table(out / "requests.parquet").to_pandas()
    for _, request in requests.iterrows():
        original = list(originals[request["prompt_id"]])
        assert list(request["prompt_token_ids"]) == original[-room:]  # the last tokens, kept in order
        if len(original) > room:
            assert truncation["original_tokens"][request["prompt_id"]] == len(original)
    assert (requests["new_tokens"] == 240).all()


def test_memory_beyond_the_machine_is_refused_with_what_fits(models, tmp_path):
    """A billion new tokens on a model built for 2^31 positions: its KV caches alone need about a terabyte."""
    out = tmp_path / "run"
    result = runner.invoke(app, run_args(models["endless"], out, "--max-new-tokens", "1000000000"))
    line = assert_one_line_error(result, "not enough memory on cpu", "KV cache", "MiB available",
                                 "largest that fits: --max-new-tokens")
    largest = int(re.search(r"--max-new-tokens (\d+) at --batch-size 1", line).group(1))
    assert 0 < largest < 1_000_000_000
    assert not out.exists()


@pytest.mark.parametrize("extra,fragments", [
    (("--k", "33"), ("--k 33", "maximum of 32")),
    (("--k", "100000"), ("--k 100000", "maximum of 32")),
    (("--methods", "ssd", "--k", "32", "--fan-out", "200"), ("fan-out budget", "x --k 32", "4096")),
    (("--methods", "ssd", "--k", "8", "--fan-out-list", "600,1,1,1,1,1,1,1,1"), ("4096",)),
])
def test_k_and_the_ssd_tree_are_bounded(models, tmp_path, extra, fragments):
    result = runner.invoke(app, run_args(models["tiny"], tmp_path / "run", *extra))
    assert_one_line_error(result, *fragments)
    assert not (tmp_path / "run").exists()


def test_sweep_checks_every_point_before_running_any(models, tmp_path):
    out = tmp_path / "sweep"
    args = ["sweep", "--target", str(models["short"]), "--suite", "smoke", "--num-prompts", "2", "--no-chat-template",
            "--batch-sizes", "1", "--k", "2,30", "--max-new-tokens", "230", "--methods", "ar,sd", "--out", str(out)]
    result = runner.invoke(app, args)
    assert_one_line_error(result, "K=30", "context of 256")
    assert not any(out.glob("*/manifest.json"))


@pytest.mark.parametrize("case", ["max-new-tokens-1", "eos-first"])
def test_requests_that_end_at_their_first_token_work_everywhere(models, tmp_path, case):
    target = models["eos-first"] if case == "eos-first" else models["tiny"]
    new_tokens = "1" if case == "max-new-tokens-1" else "16"
    out = tmp_path / "run"
    result = runner.invoke(app, run_args(target, out, "--methods", "ar,sd,ssd", "--max-new-tokens", new_tokens))
    assert result.exit_code == 0, result.output
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"
    requests = pq.read_table(out / "requests.parquet").to_pandas()
    assert len(requests) == 9 and (requests["new_tokens"] == 1).all() and (requests["rounds"] == 0).all()
    assert set(requests["finish_reason"]) == ({"eos"} if case == "eos-first" else {"length"})
    assert pq.read_table(out / "steps.parquet").num_rows == 0

    report = runner.invoke(app, ["report", str(out)])
    assert report.exit_code == 0, report.output
    assert (out / "report" / "report.html").is_file()
    compare = runner.invoke(app, ["compare", str(out), str(out), "--format", "json"])
    assert compare.exit_code == 0, compare.output
    payload = json.loads(compare.stdout)
    assert not any("no prompts in common" in note for note in payload["notes"])
    assert any("ended at its first token" in note for note in payload["notes"])
    project = runner.invoke(app, ["project", str(out), "--format", "json"])
    assert project.exit_code == 0, project.output
    projected = json.loads(project.stdout)
    assert projected["projection"] == [] and "no recorded rounds" in projected["notes"][0]
    assert "nothing to predict or project" in runner.invoke(app, ["project", str(out)]).output

    sweep = runner.invoke(app, ["sweep", "--target", str(target), "--suite", "smoke", "--num-prompts", "2",
                                "--no-chat-template", "--batch-sizes", "1,2", "--k", "2", "--max-new-tokens", new_tokens,
                                "--out", str(tmp_path / "sweep")])
    assert sweep.exit_code == 0, sweep.output
