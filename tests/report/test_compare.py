"""`ssdbench compare` on synthetic runs with known answers, and on damaged or unfair inputs."""

from __future__ import annotations

import json

import pytest
from cli_checks import assert_one_line_error
from synthetic_runs import Variant, speeds, write_run
from typer.testing import CliRunner

from ssdbench.cli.main import app
from ssdbench.records import reader, schema
from ssdbench.records.reader import load_run
from ssdbench.report.compare import compare_runs

runner = CliRunner()


def compare(*args: str):
    return runner.invoke(app, ["compare", *args])




@pytest.fixture
def two_runs(tmp_path):
    """Run 0: ar and sd (1.5× ar); run 1: ar 0.9× run 0's ar, sd 1.8× run 0's ar."""
    a = write_run(tmp_path / "a", [Variant("ar", speeds(8, seed=1)),
                                   Variant("sd", speeds(8, factor=1.5, seed=2), accepted=(3,))])
    b = write_run(tmp_path / "b", [Variant("ar", speeds(8, factor=0.9, seed=3)),
                                   Variant("sd", speeds(8, factor=1.8, seed=4), accepted=(3,))])
    return a, b


def test_speedups_are_paired_across_runs_against_the_first_runs_ar(two_runs):
    comparison = compare_runs([load_run(p) for p in two_runs])
    rows = comparison.rows.set_index("label")
    assert comparison.baseline == "0:ar" and list(rows.index) == ["0:ar", "0:sd", "1:ar", "1:sd"]
    for label, planted in {"0:sd": 1.5, "1:ar": 0.9, "1:sd": 1.8}.items():
        row = rows.loc[label]
        assert row["speedup_low"] <= planted <= row["speedup_high"] and row["speedup_pairs"] == 8, label
    assert rows.loc["0:sd", "acceptance_length"] == 4.0 and rows.loc["0:sd", "outputs_match"] == 1.0


def test_table_shows_every_run_and_variant(two_runs):
    result = compare(*map(str, two_runs))
    assert result.exit_code == 0, result.output
    assert "speedup vs 0:ar" in result.output and "1.00× (baseline)" in result.output
    assert "run 1:" in result.output and result.output.count("│ sd ") == 2


def test_baseline_variant_by_run_and_label(two_runs):
    comparison = compare_runs([load_run(p) for p in two_runs], baseline="1:sd")
    rows = comparison.rows.set_index("label")
    assert rows.loc["1:sd", "speedup"] == 1.0 and 1 / 1.8 * 0.95 < rows.loc["0:ar", "speedup"] < 1 / 1.8 * 1.05
    assert compare_runs([load_run(p) for p in two_runs], baseline="sd").baseline == "0:sd"
    assert_one_line_error(compare(*map(str, two_runs), "--baseline-variant", "sdd"), "'sdd'", "did you mean", "0:sd")


def test_per_position_acceptance_and_acceptance_lengths(tmp_path):
    # Rounds accept 4, 2, 0, 1 of K=4 drafts (emitted 5, 3, 1, 2): 22 decode tokens = two cycles.
    run = write_run(tmp_path / "r", [Variant("ar"), Variant("sd", accepted=(4, 2, 0, 1))], new_tokens=23)
    row = compare_runs([load_run(run)]).rows.set_index("label").loc["0:sd"]
    assert row["accept_marginal"] == pytest.approx([3 / 4, 2 / 4, 1 / 4, 1 / 4])
    assert row["accept_conditional"] == pytest.approx([3 / 4, 2 / 3, 1 / 2, 1.0])
    assert row["acceptance_length"] == pytest.approx(11 / 4)
    assert row["draft_acceptance_rate"] == pytest.approx(7 / 16)
    out = compare(str(run)).output
    assert "0.75 0.50 0.25 0.25" in out and "0.75 0.67 0.50 1.00" in out and "2.75 / 2.75" in out


def test_ssd_hit_rate_and_acceptance_on_hit_and_miss(tmp_path):
    # Hits accept 3 (emit 4), misses accept 1 (emit 2): 12 decode tokens = two cycles.
    run = write_run(tmp_path / "r", [Variant("ar"), Variant("ssd", accepted=(3, 1), cache_hits=(True, False))],
                    new_tokens=13)
    rows = compare_runs([load_run(run)]).rows.set_index("label")
    assert rows.loc["0:ssd", "cache_hit_rate"] == 0.5
    assert (rows.loc["0:ssd", "acceptance_length_hit"], rows.loc["0:ssd", "acceptance_length_miss"]) == (4.0, 2.0)
    assert rows.loc["0:ar", "cache_hit_rate"] != rows.loc["0:ar", "cache_hit_rate"]  # NaN outside ssd
    assert "50% (4.00/2.00)" in compare(str(run)).output


def test_sampled_outputs_are_not_compared(tmp_path):
    run = write_run(tmp_path / "r", [Variant("ar"), Variant("sd", accepted=(3,))], temperature=0.7)
    assert "n/a (sampled)" in compare(str(run)).output


@pytest.mark.parametrize("override,field", [
    ({"model_hashes": {"target": {"model.safetensors": "b" * 64}}}, "model weights"),
    ({"config": {"dtype": "bfloat16"}}, "dtype"),
    ({"attention_backend": "flash"}, "attention backend"),
    ({"kernels": {"target": {"linear": "matmul<2rows<=onednn"}}}, "kernels"),
    ({"environment": {"cpu": {"model": "Other CPU"}}}, "hardware"),
    ({"environment": {"gpus": {"devices": [{"name": "NVIDIA H200"}]}}}, "hardware"),
    ({"suite": {"sha256": "6" * 64}}, "suite content"),
])
def test_unfair_comparisons_are_refused_unless_allowed(tmp_path, override, field):
    a = write_run(tmp_path / "a", [Variant("ar")])
    b = write_run(tmp_path / "b", [Variant("ar")], manifest=override)
    assert_one_line_error(compare(str(a), str(b)), "refusing an unfair comparison", field, "--allow-mismatch")
    result = compare(str(a), str(b), "--allow-mismatch")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    warning = next(i for i, line in enumerate(lines) if line.startswith("warning:") and field in line)
    assert warning < next(i for i, line in enumerate(lines) if "ssdbench compare" in line)


# Roles as real runs record them: an `ar,sd` run has a target and a draft, an `ar,sd,ssd` run also
# the ssd draft process, an n-gram run the target alone.
KERNELS = {"linear": "matmul", "attention": "sdpa", "dtype": "float32"}
DRAFT = {"model_hashes": {"draft": {"model.safetensors": "d" * 64}}, "kernels": {"draft": KERNELS}}
WITH_SSD = {**DRAFT, "kernels": {"draft": KERNELS, "ssd draft process": KERNELS}}


def test_runs_are_compared_on_the_variants_both_have(tmp_path):
    ngram_ar = write_run(tmp_path / "ngram", [Variant("ar")])
    ar_sd = write_run(tmp_path / "sd", [Variant("ar"), Variant("sd", accepted=(3,))], manifest=DRAFT)
    with_ssd = write_run(tmp_path / "ssd", [Variant("ar"), Variant("sd", accepted=(3,)),
                                            Variant("ssd", accepted=(3,), cache_hits=(True,))], manifest=WITH_SSD)
    for pair in [(ar_sd, with_ssd), (ngram_ar, ar_sd), (with_ssd, ngram_ar)]:
        result = compare(*map(str, pair))
        assert result.exit_code == 0 and "speedup vs 0:ar" in result.output, result.output
        assert "warning" not in result.output
    other_draft = write_run(tmp_path / "other", [Variant("ar"), Variant("sd", accepted=(3,))], manifest={
        **WITH_SSD, "model_hashes": {"draft": {"model.safetensors": "e" * 64}}})
    assert_one_line_error(compare(str(with_ssd), str(other_draft)), "refusing an unfair comparison", "model weights")


def test_a_run_given_twice_or_with_unchecked_tables_is_warned_of(tmp_path):
    run = write_run(tmp_path / "r", [Variant("ar"), Variant("sd", accepted=(3,))])
    result = compare(str(run), str(run))
    assert result.exit_code == 0 and "warning: run 1 is the same run as run 0 (r): it is compared with itself" \
        in result.output, result.output
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["files"]
    (run / "manifest.json").write_text(json.dumps(manifest))
    result = compare(str(run), "--format", "json")
    assert result.exit_code == 0 and json.loads(result.stdout)["warnings"] == [
        f"run 0 ({run}) lists no file hashes in its manifest: its tables could not be checked against what was "
        "recorded"]


def test_other_settings_are_noted_not_refused(tmp_path):
    a = write_run(tmp_path / "a", [Variant("ar")])
    b = write_run(tmp_path / "b", [Variant("ar")], manifest={"config": {"k": 6}})
    result = compare(str(a), str(b))
    assert result.exit_code == 0 and "settings differ from run 0's: k 4 → 6" in result.output


def test_markdown_is_a_table_with_every_row(two_runs):
    result = compare(*map(str, two_runs), "--format", "markdown", "--fail-on", "decode_tokens_per_s:-5%")
    assert result.exit_code == 1, result.output  # run 1's ar is planted at 0.9×
    table = [line for line in result.output.splitlines() if line.startswith("|")]
    widths = {line.count("|") for line in table}
    assert len(table) == 2 + 4 and len(widths) == 1  # header, rule, 4 rows, all with the same columns
    assert table[2].startswith("| 0 | ar |") and "**GATE FAILED" in result.output
    assert "- `decode_tokens_per_s:-5%` run 1 ar: **FAIL**" in result.output


def test_json_has_every_row_with_nulls_for_nan(two_runs):
    result = compare(*map(str, two_runs), "--format", "json")
    payload = json.loads(result.stdout)
    assert [row["label"] for row in payload["rows"]] == ["0:ar", "0:sd", "1:ar", "1:sd"]
    assert payload["rows"][0]["draft_acceptance_rate"] is None and payload["gate"] is None
    assert payload["rows"][1]["accept_marginal"] == [1.0, 1.0, 1.0, 0.0]


def test_missing_corrupt_and_non_run_directories(tmp_path):
    run = write_run(tmp_path / "r", [Variant("ar")])
    assert_one_line_error(compare(str(tmp_path / "nope")), "does not exist")
    (tmp_path / "empty").mkdir()
    assert_one_line_error(compare(str(tmp_path / "empty")), "not an ssdbench run")
    (run / "steps.parquet").write_bytes(b"not parquet at all")
    assert_one_line_error(compare(str(run)), "steps.parquet", "corrupt")
    (run / "steps.parquet").unlink()
    assert_one_line_error(compare(str(run)), "steps.parquet is missing")


def test_a_newer_schema_version_is_refused_in_one_line(tmp_path):
    run = write_run(tmp_path / "r", [Variant("ar")])
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "schema_version": schema.SCHEMA_VERSION + 1}))
    assert_one_line_error(compare(str(run)), f"schema v{schema.SCHEMA_VERSION + 1}", "newer", "upgrade ssdbench")


def test_older_schema_versions_are_upgraded_or_named(tmp_path, monkeypatch):
    """As if the schema moved on one version: today's run reads through its upgrader, or says it cannot."""
    run = write_run(tmp_path / "r", [Variant("ar"), Variant("sd", accepted=(3,))])
    current = schema.SCHEMA_VERSION
    monkeypatch.setattr(schema, "SCHEMA_VERSION", current + 1)
    assert_one_line_error(compare(str(run)), f"schema v{current}", "can no longer read")
    monkeypatch.setitem(reader.UPGRADERS, current, lambda manifest, tables: (manifest, tables))
    result = compare(str(run))
    assert result.exit_code == 0 and "1.00× (baseline)" in result.output


def test_allow_mismatch_in_hardware_allows_only_hardware(tmp_path):
    """The CI gate's setting: another CPU model is fine for deterministic metrics; other weights are not."""
    a = write_run(tmp_path / "a", [Variant("ar")])
    other_cpu = write_run(tmp_path / "cpu", [Variant("ar")], manifest={"environment": {"cpu": {"model": "Other CPU"}}})
    other_both = write_run(tmp_path / "both", [Variant("ar")], manifest={
        "environment": {"cpu": {"model": "Other CPU"}}, "config": {"dtype": "bfloat16"}})
    result = compare(str(a), str(other_cpu), "--allow-mismatch-in", "hardware")
    assert result.exit_code == 0 and "warning: hardware differs" in result.output, result.output
    assert_one_line_error(compare(str(a), str(other_both), "--allow-mismatch-in", "hardware"),
                          "refusing an unfair comparison", "dtype")
    assert_one_line_error(compare(str(a), str(other_cpu), "--allow-mismatch-in", "hardwre"), "did you mean 'hardware'")


def test_allow_mismatch_in_kernels_allows_another_draft_kernel(tmp_path):
    """The ssd gate's setting: its outputs must equal ar's whatever kernel the draft ran."""
    a = write_run(tmp_path / "a", [Variant("ar")], manifest={"kernels": {"draft": {"linear": "int8pack_mm"}}})
    other = write_run(tmp_path / "b", [Variant("ar")], manifest={"kernels": {"draft": {"linear": "int8_gemv"}}})
    assert_one_line_error(compare(str(a), str(other)), "refusing an unfair comparison", "kernels differs")
    result = compare(str(a), str(other), "--allow-mismatch-in", "kernels")
    assert result.exit_code == 0 and "warning: kernels differs" in result.output, result.output
