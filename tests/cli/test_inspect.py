"""`ssdbench ls` and `ssdbench validate` on tiny model folders and a fake Hugging Face cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cli_checks import assert_one_line_error
from cli_fixtures import save_tiny_model
from typer.testing import CliRunner

from ssdbench.cli import inspect
from ssdbench.cli.main import app

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("models") / "tiny", vocab=64, seed=0)


@pytest.fixture
def caches(tmp_path, monkeypatch) -> Path:
    """An empty ssdbench cache and a HF cache holding one snapshot of Qwen/Qwen3-0.6B."""
    monkeypatch.setenv("SSDBENCH_CACHE_DIR", str(tmp_path / "ssdbench-cache"))
    hub = tmp_path / "hub"
    (hub / "models--Qwen--Qwen3-0.6B" / "snapshots" / "abc123").mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    return hub




def test_ls_json_lists_everything(caches):
    result = runner.invoke(app, ["ls", "--format", "json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert {"ar", "sd"} <= {m["name"] for m in info["methods"]} and "native" in info["engines"]
    assert {"name": "sdpa", "available": True, "reason": ""} in info["attention_backends"]
    suites = {s["name"]: s for s in info["suites"]}
    assert suites["smoke"]["available"] and not suites["gsm8k"]["available"]
    cached = {a["alias"]: a["cached"] for a in info["aliases"]}
    assert cached["qwen3-0.6b"] and not cached["llama-3.1-70b"]
    assert info["embedded_default"]["converted"] is False  # the ssdbench cache here is empty
    assert info["packages"]["versions"]["torch"] and info["packages"]["cuda_available"] == torch.cuda.is_available()


def test_ls_suites_follow_the_data_dir(caches, tmp_path):
    (tmp_path / "data" / "gsm8k").mkdir(parents=True)
    (tmp_path / "data" / "gsm8k" / "test.jsonl").write_text('{"question": "1+1?", "answer": "2"}\n')
    info = json.loads(runner.invoke(app, ["ls", "--format", "json", "--data-dir", str(tmp_path / "data")]).stdout)
    assert {s["name"]: s["available"] for s in info["suites"]}["gsm8k"]


def test_ls_table(caches):
    result = runner.invoke(app, ["ls"])
    assert result.exit_code == 0, result.output
    for fragment in ("attention backends", "sdpa", "smoke", "qwen3-0.6b", "embedded default", "torch", "CUDA"):
        assert fragment in result.output, fragment


def test_validate_a_pair_that_fits(tiny, tmp_path):
    draft = save_tiny_model(tmp_path / "draft", vocab=64, seed=1)
    for extra in (["--draft", str(draft)], ["--draft", "self-int8"], ["--draft", "ngram", "--dtype", "bfloat16"]):
        result = runner.invoke(app, ["validate", "--target", str(tiny), *extra])
        assert result.exit_code == 0, result.output
        assert "64 tokens" in result.output and "MiB needed" in result.output and "ok:" in result.output


def test_validate_refuses_different_vocabularies(tiny, tmp_path):
    other = save_tiny_model(tmp_path / "other", vocab=80, seed=1)
    assert_one_line_error(runner.invoke(app, ["validate", "--target", str(tiny), "--draft", str(other)]), "vocabular")


def test_validate_refuses_a_missing_model_and_bad_options(tiny, tmp_path):
    missing = tmp_path / "no-such-model"
    assert_one_line_error(runner.invoke(app, ["validate", "--target", str(missing), "--draft", "ngram"]), str(missing))
    assert_one_line_error(runner.invoke(app, ["validate", "--target", str(tiny), "--dtype", "fp8"]), "--dtype")
    assert_one_line_error(runner.invoke(app, ["validate", "--target", str(tiny), "--device", "tpu:0"]), "--device")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_validate_without_cuda(tiny):
    assert_one_line_error(runner.invoke(app, ["validate", "--target", str(tiny), "--device", "cuda"]), "CUDA is not available")


def test_validate_refuses_what_does_not_fit(tiny, monkeypatch):
    monkeypatch.setattr(inspect, "_free_bytes", lambda device: 2**19)  # half a MiB free
    assert_one_line_error(runner.invoke(app, ["validate", "--target", str(tiny), "--draft", "self-int8"]),
                   "not enough memory on cpu", "0 MiB available")


def test_validate_and_run_refuse_the_same_self_skip_layers(tmp_path):
    """One truth: validate runs run's own checks, so a layer the model lacks is refused by both, alike."""
    three = save_tiny_model(tmp_path / "three", vocab=64, seed=0, num_layers=3)
    refused = assert_one_line_error(runner.invoke(app, ["validate", "--target", str(three), "--draft", "self-skip:7"]),
                                    "cannot skip layer 7", "3 layers")
    run = runner.invoke(app, ["run", "--target", str(three), "--draft", "self-skip:7", "--suite", "smoke",
                              "--num-prompts", "1", "--max-new-tokens", "2", "--out", str(tmp_path / "run")])
    assert assert_one_line_error(run) == refused
    assert runner.invoke(app, ["validate", "--target", str(three), "--draft", "self-skip:1"]).exit_code == 0


def test_validate_sizes_memory_by_the_models_context(tmp_path):
    short = save_tiny_model(tmp_path / "short", vocab=64, seed=0, max_positions=256)
    result = runner.invoke(app, ["validate", "--target", str(short), "--draft", "ngram"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # Rich wraps long lines
    assert "1 sequence × 256 positions, the models' context" in text and "2048" not in text


def test_ls_runs_names_a_missing_folder(tmp_path):
    assert_one_line_error(runner.invoke(app, ["ls", "--runs", str(tmp_path / "nope")]), "--runs", "no such folder")
    (tmp_path / "file").write_text("")
    assert_one_line_error(runner.invoke(app, ["ls", "--runs", str(tmp_path / "file")]), "not a folder")


def test_ls_runs_lists_runs_with_damaged_tables_as_damaged(tmp_path):
    from synthetic_runs import Variant, write_run

    runs = tmp_path / "runs"
    for name in ("whole", "missing", "corrupt", "tampered"):
        write_run(runs / name, [Variant("ar")])
    (runs / "missing" / "steps.parquet").unlink()
    (runs / "corrupt" / "requests.parquet").write_bytes(b"not parquet")
    other = write_run(tmp_path / "other", [Variant("ar", 50.0)])
    (other / "steps.parquet").replace(runs / "tampered" / "steps.parquet")  # another run's valid table
    result = runner.invoke(app, ["ls", "--runs", str(runs), "--format", "json"])
    assert result.exit_code == 0, result.output
    listed = {Path(r["path"]).name: r for r in json.loads(result.stdout)["runs"]}
    assert listed["whole"]["state"] == "complete"
    for name, fragment in (("missing", "steps.parquet is missing"), ("corrupt", "requests.parquet is corrupt"),
                           ("tampered", "does not match the sha256")):
        assert listed[name]["state"] == "damaged" and fragment in listed[name]["detail"], listed[name]
