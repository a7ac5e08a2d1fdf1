"""`ssdbench export --format specbench`: Spec-Bench's own formulas, applied to the exported files,
give back ssdbench's end-to-end speedup and acceptance from the same run.

The formulas (Spec-Bench's evaluation/speed.py, reimplemented here): per question,
speed = Σ new_tokens / Σ wall_time over its turns; speedup = mean(speeds) / mean(baseline
speeds); mean accepted tokens = mean of every accept_lengths entry (prefill's included).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_checks import assert_one_line_error
from cli_fixtures import save_tiny_model
from typer.testing import CliRunner

from ssdbench.cli.main import app

runner = CliRunner()
QUESTIONS = [  # Spec-Bench's question.jsonl layout, in its spec_bench/ data folder
    {"question_id": 81, "category": "writing", "turns": ["w3 w4 w5 w3 w4", "w6"]},
    {"question_id": 161, "category": "translation", "turns": ["w7 w8 w7 w8 w9"]},
    {"question_id": 241, "category": "summarization", "turns": ["w10 w11 w12 w10 w11 w12"]},
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("specbench")
    target = save_tiny_model(root / "tiny", vocab=64, seed=0)
    (root / "data" / "spec_bench").mkdir(parents=True)
    (root / "data" / "spec_bench" / "question.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    out = root / "run"
    result = runner.invoke(app, ["run", "--target", str(target), "--suite", "specbench", "--data-dir", str(root / "data"),
                                 "--methods", "ar,sd,ssd", "--k", "3", "--fan-out", "2", "--max-new-tokens", "12",
                                 "--no-chat-template", "--num-prompts", "0", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def read_answers(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def specbench_speedup(answers: list[dict], baseline: list[dict]) -> float:
    def speeds(rows):
        return [sum(r["choices"][0]["new_tokens"]) / sum(r["choices"][0]["wall_time"]) for r in rows]

    return float(np.mean(speeds(answers)) / np.mean(speeds(baseline)))


def specbench_mean_accepted(answers: list[dict]) -> float:
    return float(np.mean([a for r in answers for a in r["choices"][0]["accept_lengths"]]))


def test_exported_answers_reproduce_speedup_and_acceptance(run_dir, tmp_path):
    result = runner.invoke(app, ["export", str(run_dir), "--format", "specbench", "--out", str(tmp_path / "answers")])
    assert result.exit_code == 0, result.output
    compared = runner.invoke(app, ["compare", str(run_dir), "--format", "json"])
    assert compared.exit_code == 0, compared.output
    rows = {row["variant"]: row for row in json.loads(compared.output)["rows"]}
    ar = read_answers(tmp_path / "answers" / "ar.jsonl")
    for variant in ("ar", "sd", "ssd"):
        answers = read_answers(tmp_path / "answers" / f"{variant}.jsonl")
        assert [(a["question_id"], a["category"]) for a in answers] == [(q["question_id"], q["category"]) for q in QUESTIONS]
        for a in answers:
            choice = a["choices"][0]
            assert sum(choice["accept_lengths"]) == choice["new_tokens"][0] and choice["accept_lengths"][0] == 1
        assert specbench_speedup(answers, ar) == pytest.approx(rows[variant]["speedup_e2e"], rel=1e-9)
        # Spec-Bench counts the prefill's token as one forward; ssdbench's acceptance length counts rounds only
        entries = [a for r in answers for a in r["choices"][0]["accept_lengths"]]
        prefills = len(answers)
        mean_accepted = specbench_mean_accepted(answers)
        assert (mean_accepted * len(entries) - prefills) / (len(entries) - prefills) == pytest.approx(
            rows[variant]["acceptance_length"], rel=1e-9)
    assert rows["sd"]["acceptance_length"] > 1  # the comparison is not trivially all ones


def test_export_refuses_an_unknown_format(run_dir, tmp_path):
    result = runner.invoke(app, ["export", str(run_dir), "--format", "mtbench", "--out", str(tmp_path)])
    assert result.exit_code != 0 and "specbench" in result.output


def export(run: Path, out: Path, *extra: str):
    return runner.invoke(app, ["export", str(run), "--format", "specbench", "--out", str(out), *extra])


def test_export_refuses_to_overwrite_answer_files(run_dir, tmp_path):
    out = tmp_path / "answers"
    out.mkdir()
    (out / "sd.jsonl").write_text("my own answers\n")
    assert_one_line_error(export(run_dir, out), "refusing to overwrite", str(out / "sd.jsonl"), "--overwrite")
    assert sorted(p.name for p in out.iterdir()) == ["sd.jsonl"]  # nothing written beside it either
    assert (out / "sd.jsonl").read_text() == "my own answers\n"
    assert export(run_dir, out, "--overwrite").exit_code == 0
    assert read_answers(out / "sd.jsonl")[0]["question_id"] == 81


def test_synthetic_acceptance_answers_are_marked(tmp_path):
    target = save_tiny_model(tmp_path / "tiny")
    run = tmp_path / "run"
    result = runner.invoke(app, ["run", "--target", str(target), "--suite", "smoke", "--num-prompts", "2",
                                 "--no-chat-template", "--max-new-tokens", "6", "--methods", "ar,sd",
                                 "--acceptance", "synthetic:0.8", "--out", str(run)])
    assert result.exit_code == 0, result.output
    result = export(run, tmp_path / "answers")
    assert result.exit_code == 0, result.output
    assert "warning: sd ran with synthetic acceptance (synthetic:0.8)" in result.output
    assert sorted(p.name for p in (tmp_path / "answers").iterdir()) == ["ar.jsonl", "sd-synthetic-0.8.jsonl"]
    for answer in read_answers(tmp_path / "answers" / "sd-synthetic-0.8.jsonl"):
        assert answer["acceptance"] == "synthetic:0.8" and answer["model_id"].endswith("-sd-synthetic:0.8")
    assert all("acceptance" not in a for a in read_answers(tmp_path / "answers" / "ar.jsonl"))  # ar is exact


@pytest.fixture
def run_on_an_edited_suite(tmp_path) -> tuple[Path, Path]:
    """A run on a Spec-Bench folder whose question.jsonl was edited afterwards (ids and categories changed)."""
    target = save_tiny_model(tmp_path / "tiny", vocab=64, seed=0)
    questions = tmp_path / "data" / "spec_bench" / "question.jsonl"
    questions.parent.mkdir(parents=True)
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    run = tmp_path / "run"
    result = runner.invoke(app, ["run", "--target", str(target), "--suite", "specbench", "--data-dir",
                                 str(tmp_path / "data"), "--methods", "ar", "--max-new-tokens", "4",
                                 "--no-chat-template", "--num-prompts", "0", "--out", str(run)])
    assert result.exit_code == 0, result.output
    edited = [{**q, "question_id": q["question_id"] + 1000, "category": "other"} for q in QUESTIONS]
    questions.write_text("".join(json.dumps(q) + "\n" for q in edited))
    return run, tmp_path / "answers"


def test_an_edited_suite_exports_the_categories_the_run_recorded(run_on_an_edited_suite):
    run, out = run_on_an_edited_suite
    result = export(run, out)
    assert result.exit_code == 0, result.output
    assert [(a["question_id"], a["category"]) for a in read_answers(out / "ar.jsonl")] == [
        (q["question_id"], q["category"]) for q in QUESTIONS]


def test_an_edited_suite_is_refused_for_a_run_that_recorded_no_categories(run_on_an_edited_suite):
    run, out = run_on_an_edited_suite
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["suite"]["categories"]  # as runs recorded before categories were kept
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert_one_line_error(export(run, out), "the suite specbench", "changed since the run", "sha256")
    assert not out.exists()
