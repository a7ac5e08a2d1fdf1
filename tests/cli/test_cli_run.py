"""`ssdbench run` through the real CLI on tiny model folders: records, table, and bad input."""

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
def tiny_target(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("models") / "tiny", vocab=64, seed=0)


def run_cli(*args: str):
    return runner.invoke(app, ["run", *args])


def base_args(target: Path, out: Path, *extra: str) -> list[str]:
    return ["--target", str(target), "--suite", "smoke", "--num-prompts", "3", "--max-new-tokens", "6",
            "--no-chat-template", "--out", str(out), *extra]


def test_run_writes_complete_records_and_a_table(tiny_target, tmp_path):
    out = tmp_path / "run"
    result = run_cli(*base_args(tiny_target, out, "--methods", "ar,sd", "--k", "3", "--batch-size", "2"))
    assert result.exit_code == 0, result.output
    assert "Greedy outputs identical to ar" in result.output and "3 requests" in result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["config"]["methods"] == ["ar", "sd"] and manifest["suite"]["num_prompts"] == 3
    steps = pq.read_table(out / "steps.parquet").to_pandas()
    requests = pq.read_table(out / "requests.parquet").to_pandas()
    assert set(requests["method"]) == {"ar", "sd"} and len(requests) == 6
    assert (steps.groupby("method")["emitted"].sum() + 3 == requests.groupby("method")["new_tokens"].sum()).all()
    assert pq.read_table(out / "gpu.parquet").num_rows == 0 and "no GPU" in manifest["gpu_telemetry"]


@pytest.mark.parametrize("draft", ["ngram", "other-model"])
def test_json_format_and_both_engines(tiny_target, tmp_path, draft):
    """transformers' model code under the same loop: rejected drafts are cropped from its cache."""
    draft_spec = "ngram" if draft == "ngram" else str(save_tiny_model(tmp_path / "draft", vocab=64, seed=5))
    result = run_cli(*base_args(tiny_target, tmp_path / "run", "--engine", "native,hf", "--draft", draft_spec,
                                "--max-new-tokens", "12", "--format", "json"))
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout.strip().splitlines()[-1])
    labels = {row["label"] for row in payload["summary"]}
    assert labels == {"ar", "sd", "ar@hf", "sd@hf"}
    assert all(row["outputs_match"] == 1.0 for row in payload["summary"])
    if draft == "other-model":  # an unrelated draft is rejected often: the crop path really ran
        sd_hf = next(row for row in payload["summary"] if row["label"] == "sd@hf")
        assert sd_hf["draft_acceptance_rate"] < 1.0


def test_markdown_format_shows_the_recorded_figures_alone_on_stdout(tiny_target, tmp_path):
    """The Markdown page renders the same report as the table: a row per variant with the figures the records give."""
    from ssdbench.metrics.summary import summarize
    from ssdbench.records.reader import load_run

    out = tmp_path / "run"
    result = run_cli(*base_args(tiny_target, out, "--methods", "ar,sd", "--k", "3", "--format", "markdown"))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| method |"))
    columns = [c.strip() for c in lines[header].strip("|").split("|")]
    rows = {cells[0]: dict(zip(columns, cells)) for cells in
            ([c.strip() for c in line.strip("|").split("|")] for line in lines[header + 2:header + 4])}
    run = load_run(out)
    summary = summarize(run.requests, run.steps).set_index("label")
    assert set(rows) == {"ar", "sd"} == set(summary.index)
    for label, row in rows.items():
        assert row["decode tok/s p50"] == f"{summary.loc[label, 'decode_tokens_per_s_median']:.2f}"
        assert row["requests"] == str(summary.loc[label, "num_requests"]) == "3"
    assert any(line.startswith("Greedy outputs identical to ar") for line in lines)
    assert lines[-1] == f"Records: `{out}`" and "━" not in result.stdout  # no Rich table on stdout


def test_missing_model_path(tmp_path):
    missing = tmp_path / "no-such-model"
    result = run_cli("--target", str(missing), "--suite", "smoke", "--out", str(tmp_path / "run"))
    assert_one_line_error(result, str(missing))
    assert not (tmp_path / "run").exists()


def test_unknown_suite_suggests(tiny_target, tmp_path):
    result = run_cli("--target", str(tiny_target), "--suite", "humaneva", "--out", str(tmp_path / "run"))
    assert_one_line_error(result, "humaneval")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flag,value", [("--k", "0"), ("--k", "-2"), ("--batch-size", "0"), ("--max-new-tokens", "-1"),
                                        ("--temperature", "-0.5"), ("--draft-temperature", "-1"), ("--top-p", "1.5"),
                                        ("--methods", "ar,xd")])
def test_bad_numbers_and_names(tiny_target, tmp_path, flag, value):
    result = run_cli(*base_args(tiny_target, tmp_path / "run", flag, value))
    assert_one_line_error(result, flag)
    assert not (tmp_path / "run").exists()


def test_vocabulary_mismatch(tiny_target, tmp_path):
    other = save_tiny_model(tmp_path / "other", vocab=80, seed=1)
    result = run_cli(*base_args(tiny_target, tmp_path / "run", "--draft", str(other)))
    assert_one_line_error(result, "vocabular")
    assert not (tmp_path / "run").exists()


def test_unwritable_out(tiny_target, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = run_cli(*base_args(tiny_target, blocker / "run"))
    assert_one_line_error(result, "a-file")


def test_malformed_suite_file(tiny_target, tmp_path):
    suite = tmp_path / "prompts.jsonl"
    suite.write_text('{"prompt": "w1 w2"}\n{"prompt": \n')
    result = run_cli("--target", str(tiny_target), "--suite", str(suite), "--out", str(tmp_path / "run"))
    assert_one_line_error(result, "prompts.jsonl", "line 2")


def test_a_folder_as_suite_is_named_a_folder(tiny_target, tmp_path):
    folder = tmp_path / "prompts"
    folder.mkdir()
    (folder / "mine.jsonl").write_text('{"prompt": "w1 w2"}\n')
    result = run_cli("--target", str(tiny_target), "--suite", str(folder), "--out", str(tmp_path / "run"))
    line = assert_one_line_error(result, f"{folder} is a folder, not a prompt file", "it holds mine.jsonl")
    assert "not found" not in line and not (tmp_path / "run").exists()


def test_existing_run_is_never_touched(tiny_target, tmp_path):
    out = tmp_path / "run"
    assert run_cli(*base_args(tiny_target, out, "--methods", "ar")).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    result = run_cli(*base_args(tiny_target, out, "--methods", "ar"))
    assert_one_line_error(result, str(out))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_failure_mid_run_marks_the_run_failed(tiny_target, tmp_path, monkeypatch):
    """A crash after the directory was claimed leaves it marked failed, never complete."""
    import ssdbench.run.execute as execute

    def crash(*args, **kwargs):
        raise RuntimeError("simulated crash in decoding")

    monkeypatch.setattr(execute, "decode_batch", crash)
    out = tmp_path / "run"
    result = run_cli(*base_args(tiny_target, out))
    assert result.exit_code != 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "simulated crash" in manifest["reason"]
    assert not (out / "steps.parquet").exists()


def test_run_with_ssd_records_hits_and_placements(tiny_target, tmp_path):
    out = tmp_path / "run"
    result = run_cli(*base_args(tiny_target, out, "--methods", "ar,sd,ssd", "--k", "3", "--fan-out", "2"))
    assert result.exit_code == 0, result.output
    assert "ssd" in result.output and "Greedy outputs identical to ar" in result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["models"]["draft"]["ssd"]["placement"]["device"] == "cpu"
    assert manifest["ssd"]["after_hit"] == [2, 2, 2, 2]
    steps = pq.read_table(out / "steps.parquet").to_pandas()
    ssd = steps[steps["method"] == "ssd"]
    assert ssd["cache_hit"].notna().all() and steps[steps["method"] != "ssd"]["cache_hit"].isna().all()
    budget = max(sum(manifest["ssd"]["after_hit"]), sum(manifest["ssd"]["after_miss"]))
    hits = ssd["cache_hit"].astype(bool)
    assert ssd["fan_out_total"].between(0, budget).all() and (ssd.loc[hits, "fan_out_total"] > 0).all()
    assert ssd.loc[hits, "backup"].isna().all() and ssd.loc[~hits, "backup"].isin(["jit", "fast"]).all()


def test_ssd_refuses_the_ngram_draft(tiny_target, tmp_path):
    result = run_cli(*base_args(tiny_target, tmp_path / "run", "--methods", "ssd", "--draft", "ngram"))
    assert_one_line_error(result, "ssd", "ngram")


def test_the_prompt_field_used_is_recorded(tiny_target, tmp_path):
    suite = tmp_path / "mine.jsonl"
    suite.write_text('{"text": "w1 w2"}\n{"text": "w3", "question": "ignored"}\n{"prompt": "w4", "text": "ignored"}\n"w5"\n')
    out = tmp_path / "run"
    result = run_cli("--target", str(tiny_target), "--suite", str(suite), "--max-new-tokens", "3", "--no-chat-template",
                     "--methods", "ar", "--out", str(out))
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["suite"]["text_fields"] == {"text": 2, "prompt": 1, "string": 1}


@pytest.mark.parametrize("line", ['{"content": "w1"}', '{"messages": [{"role": "user", "content": "w1"}]}', "{}"])
def test_a_line_without_a_prompt_field_is_refused(tiny_target, tmp_path, line):
    suite = tmp_path / "mine.jsonl"
    suite.write_text('{"prompt": "w1 w2"}\n' + line + "\n")
    result = run_cli("--target", str(tiny_target), "--suite", str(suite), "--out", str(tmp_path / "run"))
    assert_one_line_error(result, f"{suite} line 2", "no prompt text", "prompt, text, question, instruction, turns")
    assert not (tmp_path / "run").exists()


def test_an_mbu_above_100_percent_is_explained(tiny_target, tmp_path, monkeypatch):
    """A probe that read slower than decoding did (the machine's bandwidth varies) gives MBU > 100%:
    the run says what that means instead of printing it bare."""
    from ssdbench.profiling.bandwidth import BandwidthReading
    from ssdbench.run import session

    def probe_reading(gbs):
        return lambda device: BandwidthReading(gbs=gbs, p10_gbs=gbs, p90_gbs=gbs, num_passes=3, sizes_mib=(64,),
                                               threads=1)

    monkeypatch.setattr(session, "measure_steady_read_bandwidth", probe_reading(1e-6))
    result = run_cli(*base_args(tiny_target, tmp_path / "run", "--methods", "ar"))
    assert result.exit_code == 0 and "MBU above 100%" in result.output, result.output
    monkeypatch.setattr(session, "measure_steady_read_bandwidth", probe_reading(1e6))
    normal = run_cli(*base_args(tiny_target, tmp_path / "run2", "--methods", "ar"))
    assert normal.exit_code == 0 and "target MBU" in normal.output and "MBU above 100%" not in normal.output
